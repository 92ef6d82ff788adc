
jaborted"why