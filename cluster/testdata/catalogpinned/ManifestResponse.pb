
 
catalog-not-foundno suchSTMF manifest