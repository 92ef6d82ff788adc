
sp-1