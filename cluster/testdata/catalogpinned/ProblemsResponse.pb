
 
catalog-not-foundno such&
delete	j/chk-1/xj"denied*kept