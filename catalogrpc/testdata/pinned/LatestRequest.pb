
j