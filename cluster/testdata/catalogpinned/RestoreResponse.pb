
 
catalog-not-foundno suchSTMF manifest"!
jj/chk-5/_metadata"corrupt*sp-1