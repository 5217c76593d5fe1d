// Synthetic view documents shaped like real models, for tests and for timing the viewer
// on big graphs (the hand-written fixture is deliberately tiny). Deterministic.

/** A trace builder that keeps ops, tensors and the printed Python in step. */
class TraceBuilder {
  constructor(kind, name, inputs) {
    this.kind = kind;
    this.ops = [];
    this.tensors = {};
    this.lines = [`# Constructed by synthetic (${kind})`, "import torch", "", `def ${name}(${inputs.join(", ")}):`];
    this.inputs = inputs;
    this.counter = 0;
    this.top = 0;
  }
  tensor(name, kind, shape = [4, 64], dtype = "float32") {
    if (!this.tensors[name]) {
      this.tensors[name] = { shape, dtype, device: "cpu", requires_grad: kind !== "input", kind, producer: null, consumers: [], stats: null };
    }
    return name;
  }
  fresh(prefix = "t") {
    return `${prefix}${this.counter++}`;
  }
  /** Add a top-level op with `prims` subsymbols; returns its output names. */
  op({ name, label, module = "", inputs, outputs, prims = [], fwdOp = null }) {
    const id = `${this.kind}:${this.top++}`;
    for (const out of outputs) this.tensor(out, "intermediate");
    const line = this.lines.length + 1;
    this.lines.push(`  ${outputs.join(", ")} = ${name}(${inputs.join(", ")})  # ${outputs[0]}: "cpu f32[4, 64]"`);
    const op = {
      id, parent: null, level: 0, name, label, is_prim: false, module_path: module, inputs, outputs,
      args_repr: inputs.join(", "), line, line_end: line + prims.length,
      source: { file: "/synthetic/model.py", line: 10 + (this.top % 40), code: `x = ${label}(x)`, context: [[10, "def forward(self, x):"]] },
      tags: [], fwd_op: fwdOp,
    };
    this.ops.push(op);
    for (const out of outputs) this.tensors[out].producer = id;
    for (const input of inputs) if (this.tensors[input]) this.tensors[input].consumers.push(id);
    // subsymbols: a chain of prims from the op's first input to its first output
    let previous = inputs[0];
    prims.forEach((prim, i) => {
      const out = i === prims.length - 1 ? outputs[0] : this.tensor(this.fresh("p"), "intermediate");
      this.lines.push(`    # ${out} = aten.${prim}(${previous})`);
      this.ops.push({
        id: `${id}.${i}`, parent: id, level: 1, name: `aten.${prim}`, label: prim, is_prim: true, module_path: module,
        inputs: [previous], outputs: [out], args_repr: previous, line: line + 1 + i, line_end: line + 1 + i,
        source: null, tags: [], fwd_op: fwdOp,
      });
      previous = out;
    });
    return outputs;
  }
  finish(outputs) {
    this.lines.push(`  return ${outputs.join(", ")}`);
    return {
      kind: this.kind, name: this.kind, provenance: "synthetic", python: this.lines.join("\n"),
      inputs: this.inputs, outputs, ops: this.ops, tensors: this.tensors,
    };
  }
}

/**
 * A nanoGPT-shaped document: forward (about 21 top-level ops a block), a backward with one
 * or two ops per forward op (fwd_op set), saved tensors and recorded steps.
 */
export function makeGptDocument({ layers = 12 } = {}) {
  const params = [];
  const param = (name) => {
    params.push(name);
    return name;
  };
  const fw = new TraceBuilder("forward", "forward", ["idx"]);
  fw.tensor("idx", "input", [4, 64], "int64");
  const p = (module, n) => {
    const name = fw.tensor(param(`${module.replace(/\./g, "_")}_${n}`), "param");
    return name;
  };
  const one = (spec) => fw.op({ ...spec, outputs: spec.outputs || [fw.fresh()] })[0];
  const linear = (module, x) => one({ name: "torch.nn.functional.linear", label: "linear", module, inputs: [x, p(module, "weight"), p(module, "bias")], prims: ["t", "addmm"] });

  const pos = one({ name: "torch.arange", label: "arange", inputs: ["idx"] });
  const tok = one({ name: "torch.nn.functional.embedding", label: "embedding", module: "transformer.wte", inputs: ["idx", p("transformer.wte", "weight")] });
  const posEmb = one({ name: "torch.nn.functional.embedding", label: "embedding", module: "transformer.wpe", inputs: [pos, p("transformer.wpe", "weight")] });
  let x = one({ name: "torch.add", label: "add", inputs: [tok, posEmb] });
  x = one({ name: "torch.nn.functional.dropout", label: "dropout", module: "transformer.drop", inputs: [x] });
  for (let i = 0; i < layers; i++) {
    const h = `transformer.h.${i}`;
    const a = one({ name: "torch.nn.functional.layer_norm", label: "layer_norm", module: `${h}.ln_1`, inputs: [x, p(`${h}.ln_1`, "weight")], prims: ["native_layer_norm"] });
    const qkv = linear(`${h}.attn.c_attn`, a);
    const [q, k, v] = fw.op({ name: "torch.split", label: "split", module: `${h}.attn`, inputs: [qkv], outputs: [fw.fresh(), fw.fresh(), fw.fresh()] });
    const heads = [q, k, v].map((t) => {
      const viewed = one({ name: "torch.Tensor.view", label: "view", module: `${h}.attn`, inputs: [t] });
      return one({ name: "torch.Tensor.transpose", label: "transpose", module: `${h}.attn`, inputs: [viewed] });
    });
    let y = one({ name: "torch.nn.functional.scaled_dot_product_attention", label: "sdpa", module: `${h}.attn`, inputs: heads, prims: ["matmul", "mul", "softmax", "matmul"] });
    y = one({ name: "torch.Tensor.transpose", label: "transpose", module: `${h}.attn`, inputs: [y] });
    y = one({ name: "torch.Tensor.contiguous", label: "contiguous", module: `${h}.attn`, inputs: [y] });
    y = one({ name: "torch.Tensor.view", label: "view", module: `${h}.attn`, inputs: [y] });
    y = linear(`${h}.attn.c_proj`, y);
    y = one({ name: "torch.nn.functional.dropout", label: "dropout", module: `${h}.attn.resid_dropout`, inputs: [y] });
    x = one({ name: "torch.add", label: "add", module: h, inputs: [x, y] });
    const b = one({ name: "torch.nn.functional.layer_norm", label: "layer_norm", module: `${h}.ln_2`, inputs: [x, p(`${h}.ln_2`, "weight")], prims: ["native_layer_norm"] });
    let m = linear(`${h}.mlp.c_fc`, b);
    m = one({ name: "torch.nn.functional.gelu", label: "gelu", module: `${h}.mlp.gelu`, inputs: [m], prims: ["mul", "erf", "add", "mul"] });
    m = linear(`${h}.mlp.c_proj`, m);
    m = one({ name: "torch.nn.functional.dropout", label: "dropout", module: `${h}.mlp.dropout`, inputs: [m] });
    x = one({ name: "torch.add", label: "add", module: h, inputs: [x, m] });
  }
  x = one({ name: "torch.nn.functional.layer_norm", label: "layer_norm", module: "transformer.ln_f", inputs: [x, p("transformer.ln_f", "weight")] });
  const logits = linear("lm_head", x);
  const loss = one({ name: "torch.nn.functional.cross_entropy", label: "cross_entropy", inputs: [logits, "idx"], prims: ["log_softmax", "nll_loss"] });
  fw.tensors[loss].kind = "output";
  fw.tensors[loss].shape = [];
  fw.inputs.push(...params);
  const forward = fw.finish([loss]);

  // Backward: walk the forward ops in reverse, one grad op per op (two for linear).
  const bw = new TraceBuilder("backward", "backward", ["saved_for_backward", "cotangents"]);
  const ct = new Map([[loss, bw.tensor("ct_loss", "input", [])]]);
  const saved = [];
  const gradOutputs = [];
  const topForward = forward.ops.filter((op) => op.parent === null).reverse();
  for (const op of topForward) {
    const cts = op.outputs.map((o) => ct.get(o)).filter(Boolean);
    if (cts.length === 0) continue;
    const data = op.inputs.filter((i) => forward.tensors[i].kind === "intermediate" || forward.tensors[i].kind === "output");
    const savedInput = op.inputs.find((i) => forward.tensors[i].kind !== "param");
    if (savedInput && !saved.some((s) => s.name === savedInput)) {
      bw.tensor(savedInput, "input");
      saved.push({
        name: savedInput, shape: [4, 64], dtype: "float32", bytes: 4 * 64 * 4, producer: null, fwd_op: op.id,
        consumers: [], module_path: op.module_path, recomputed: false,
      });
    }
    const grads = bw.op({
      name: `grad_${op.label}`, label: `∂${op.label}`, module: op.module_path,
      inputs: savedInput ? [...cts, savedInput] : cts, outputs: data.map(() => bw.fresh("g")), fwdOp: op.id,
    });
    const entry = saved.find((s) => s.name === savedInput);
    if (entry) entry.consumers.push(bw.ops[bw.ops.length - 1].id);
    data.forEach((input, i) => {
      const previous = ct.get(input);
      ct.set(input, previous ? bw.op({ name: "torch.add", label: "add", module: op.module_path, inputs: [previous, grads[i]], outputs: [bw.fresh("g")], fwdOp: op.id })[0] : grads[i]);
    });
    const weights = op.inputs.filter((i) => forward.tensors[i].kind === "param");
    if (weights.length) {
      const wg = bw.op({ name: `grad_${op.label}_params`, label: `∂${op.label} params`, module: op.module_path, inputs: cts, outputs: weights.map(() => bw.fresh("g")), fwdOp: op.id });
      gradOutputs.push(...wg);
    }
  }
  for (const g of gradOutputs) bw.tensors[g].kind = "output";
  const backward = bw.finish(gradOutputs);

  const steps = backward.ops
    .filter((op) => op.parent === null)
    .map((op, index) => ({
      index, op: op.id, outputs: Object.fromEntries(op.outputs.map((o) => [o, stats(index)])),
      grads: op.outputs.some((o) => gradOutputs.includes(o)) ? { [op.outputs[0]]: stats(index + 1) } : {},
    }));

  return {
    format: "thunderviz", version: 1, title: `synthetic GPT, ${layers} layers`, created_by: "synthetic",
    traces: { forward, backward }, saved, steps, grad_flow: {}, transforms: [],
  };
}

function stats(seed) {
  const norm = Math.exp(((seed * 7919) % 100) / 20 - 2.5);
  return { min: -norm, max: norm, mean: 0, std: norm / 4, norm, numel: 256, nan: 0, inf: 0, hist: null };
}

/** A module-less trace of `n` elementwise ops in a chain (no way to collapse it). */
export function makeFlatDocument(n) {
  const fw = new TraceBuilder("forward", "forward", ["x"]);
  fw.tensor("x", "input");
  let x = "x";
  for (let i = 0; i < n; i++) x = fw.op({ name: "torch.sin", label: "sin", inputs: [x], outputs: [fw.fresh()] })[0];
  return { format: "thunderviz", version: 1, title: "flat", created_by: "synthetic", traces: { forward: fw.finish([x]) } };
}
