
 
catalog-not-foundno suchjj2