
 
catalog-not-foundno such