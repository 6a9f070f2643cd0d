"""Compiling a graph: tasks, tuning-database selection, the parallel kernel build, the model
cache, the memory plan and the compiled-model check."""
