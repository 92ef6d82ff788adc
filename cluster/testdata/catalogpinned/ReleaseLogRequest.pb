
j/log/a