
j2j"sp-1*claim0