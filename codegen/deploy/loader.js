// Kiln's loader for a model compiled to WebAssembly (kiln compile --target wasm32).
//   import { loadModel } from "./model.js";
//   const model = await loadModel("model.wasm");      // a URL, ArrayBuffer or Uint8Array
//   const [out] = model.run([new Float32Array(...)]);  // typed arrays in input order
// Inputs and outputs are C-contiguous typed arrays of META's dtypes and shapes (int64 as
// BigInt64Array). One model instance runs one call at a time, on the calling thread.

const TYPED = {
  float32: Float32Array, float64: Float64Array, int8: Int8Array, uint8: Uint8Array,
  int16: Int16Array, uint16: Uint16Array, int32: Int32Array, uint32: Uint32Array,
  int64: BigInt64Array, uint64: BigUint64Array, bool: Uint8Array,
  float16: Uint16Array, bfloat16: Uint16Array,   // raw bits
};

async function wasmBytes(source) {
  if (source instanceof ArrayBuffer || ArrayBuffer.isView(source)) return source;
  const response = source instanceof Response ? source : await fetch(source);
  if (!response.ok) throw new Error(`cannot fetch ${response.url}: HTTP ${response.status}`);
  return response.arrayBuffer();
}

export async function loadModel(source, meta = META) {
  const module = await WebAssembly.compile(await wasmBytes(source));
  const imports = {};
  for (const imp of WebAssembly.Module.imports(module)) {
    if (imp.kind !== "function") continue;   // Kiln's modules import nothing; be explicit
    (imports[imp.module] ??= {})[imp.name] = () => {
      throw new Error(`the model called ${imp.module}.${imp.name}, which the loader lacks`);
    };
  }
  const instance = await WebAssembly.instantiate(module, imports);
  return new KilnModel(instance.exports, meta);
}

export class KilnModel {
  constructor(exports, meta) {
    this.exports = exports;
    this.meta = meta;
    if (exports._initialize) exports._initialize();
    const alloc = (n) => {
      const p = exports.malloc(Math.max(n, 1));
      if (!p) throw new Error(`model '${meta.name}': out of wasm memory (${n} bytes)`);
      return p;
    };
    this.inputs = meta.inputs.map((t) => alloc(t.bytes));
    this.outputs = meta.outputs.map((t) => alloc(t.bytes));
    this.inTable = alloc(4 * Math.max(meta.inputs.length, 1));
    this.outTable = alloc(4 * Math.max(meta.outputs.length, 1));
    this.workspace = meta.workspace_bytes ? alloc(meta.workspace_bytes) : 0;
    const view = new DataView(exports.memory.buffer);
    this.inputs.forEach((p, k) => view.setUint32(this.inTable + 4 * k, p, true));
    this.outputs.forEach((p, k) => view.setUint32(this.outTable + 4 * k, p, true));
    this.runFn = exports[`${meta.prefix}_run`];
  }

  // Runs the model: `inputs` is an array in input order or an object by input name.
  run(inputs) {
    const meta = this.meta;
    const list = Array.isArray(inputs) ? inputs : meta.inputs.map((t) => inputs[t.name]);
    if (list.length !== meta.inputs.length) {
      throw new Error(`model '${meta.name}' takes ${meta.inputs.length} inputs ` +
                      `(${meta.inputs.map((t) => t.name).join(", ")}), got ${list.length}`);
    }
    let memory = new Uint8Array(this.exports.memory.buffer);
    list.forEach((value, k) => {
      const t = meta.inputs[k];
      const bytes = value instanceof ArrayBuffer ? new Uint8Array(value)
        : new Uint8Array(value.buffer, value.byteOffset, value.byteLength);
      if (bytes.byteLength !== t.bytes) {
        throw new Error(`input '${t.name}' of model '${meta.name}': expected ${t.dtype}` +
                        `[${t.shape}] (${t.bytes} bytes), got ${bytes.byteLength} bytes`);
      }
      memory.set(bytes, this.inputs[k]);
    });
    const rc = this.runFn(this.inTable, this.outTable, this.workspace);
    if (rc !== 0) throw new Error(`${meta.prefix}_run failed (${rc}): ${this.errorMessage(rc)}`);
    memory = new Uint8Array(this.exports.memory.buffer);   // the heap may have grown
    return meta.outputs.map((t, k) => {
      const copy = memory.slice(this.outputs[k], this.outputs[k] + t.bytes);
      return new TYPED[t.dtype](copy.buffer);
    });
  }

  errorMessage(code) {
    const p = this.exports[`${this.meta.prefix}_error_message`](code);
    const memory = new Uint8Array(this.exports.memory.buffer);
    let end = p;
    while (memory[end]) end++;
    return new TextDecoder().decode(memory.subarray(p, end));
  }
}

// A typed array of `dtype` over `buffer` (an ArrayBuffer), as the loader returns outputs.
export function typedArray(dtype, buffer) {
  return new TYPED[dtype](buffer);
}
