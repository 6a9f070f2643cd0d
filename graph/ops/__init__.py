"""The graph op set: fusion class, shape/dtype inference, TE lowering and numpy reference of
every graph op (core.py the first ones, more.py and the others through define()); int8/ the
quantized ops."""
