"""Reading results back for people: the stage report, its cache, comparisons, the memory
report and plots."""
