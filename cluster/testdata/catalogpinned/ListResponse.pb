
 
catalog-not-foundno suche	completed€πε‚¤ή²Γ €„Ρί§ή²Γ(
08BwhyJ (0PXbj2hr
corruptcorrupt data
bad crc"aborted€πε‚¤ή²ΓBtask failed