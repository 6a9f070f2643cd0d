"""`kiln compile --c-api` and `kiln compile --target wasm32`: the deploy exports on the
command line (kept out of cli.py, which only routes here)."""
from __future__ import annotations

from .te.errors import KilnError


def parse_input_shapes(items) -> dict[str, tuple[int, ...]]:
    """["x=1,3,32,32", ...] -> {"x": (1, 3, 32, 32)}."""
    shapes = {}
    for item in items or ():
        name, sep, dims = item.partition("=")
        try:
            shape = tuple(int(d) for d in dims.split(",") if d.strip())
        except ValueError:
            shape = ()
        if not sep or not name or not shape or any(d < 0 for d in shape):
            raise KilnError(f"--input-shape {item!r}: expected NAME=D,D,... with non-negative "
                            "integer dimensions, e.g. input=1,3,224,224")
        shapes[name] = shape
    return shapes


def compile_deployable(args, db, console) -> int:
    shapes = parse_input_shapes(args.input_shape) or None
    if args.target.startswith("wasm32"):
        from .deploy_wasm import export_wasm
        # "wasm32" and "wasm32+simd128" use 128-bit SIMD; "wasm32-simd128" does not
        out = export_wasm(args.model, args.output, prefix=args.prefix, input_shapes=shapes,
                          db=db, layout=args.layout, winograd=args.winograd,
                          simd="-simd128" not in args.target)
        console.print(f"wrote {out.wasm}, {out.loader} and {out.page}")
        return 0
    from .deploy import export_c
    lib = export_c(args.model, args.output, prefix=args.prefix, weights=args.weights,
                   input_shapes=shapes, target=args.target, db=db, threads=args.threads,
                   layout=args.layout, winograd=args.winograd)
    wrote = [str(p) for p in (lib.shared, lib.static, lib.header, lib.weights_file) if p]
    console.print(f"wrote {', '.join(wrote)}")
    sizes = lib.sizes
    console.print(f"library {sizes['shared_library']} bytes: code and data "
                  f"{sizes['code_and_data']} (weights {sizes['weights']})")
    return 0
