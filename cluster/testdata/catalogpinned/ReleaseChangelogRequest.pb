
run-1j/log/a