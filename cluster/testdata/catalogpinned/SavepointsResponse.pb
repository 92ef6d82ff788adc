
 
catalog-not-foundno suchSTMF aSTMF b