"""Models run on shape-generic kernels (codegen/generic): the first tier of a tiered
compile, ready without compiling a kernel for the model.

lowering.py: how a graph node becomes calls of generic kernels (registry + Context);
ops_*.py: the lowerings by op family; model.py: GenericModel, a plan of calls run natively;
compile.py: the tier-0 compile kiln.compile uses when tiered.
"""
