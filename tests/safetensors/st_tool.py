#!/usr/bin/python3
"""st_tool.py — safetensors files for the tests, written by hand (struct +
json + numpy; no safetensors library), in Hugging Face's GPT-2 layout.

  gen OUT --L 2 --C 64 --V 256 --Vp 320 --maxT 64 --NH 4 [--seed S]
      [--dtype F32|BF16|F16] [--prefix transformer.|none] [--buffers 1|0] [--llmc OUT.bin]
      random tensors named as GPT2LMHeadModel.save_pretrained names them
      (Conv1D weights [in, out]; wte [V, C]), plus an attention-mask buffer
      per layer that is no parameter; --llmc also writes the same values
      (widened to fp32) as llm.c's model file, version 3 (Conv1D weights
      transposed, wte padded with zero rows to Vp)
  cmp A B           same tensors (names, dtypes, shapes, bytes); exit 1 if not
  eq FILE A B       tensors A and B of FILE hold the same bytes (exit 1 if not)
  close A B TOL     same names, dtypes and shapes; F32 values within TOL (absolute)
  bf16of A B        B's tensors are A's F32 tensors rounded to BF16 (nearest even)
  corrupt IN KIND OUT [ARG]   a broken copy (KINDS below)
  shard OUT V NTOK [SEED]     an llm.c token shard of random tokens below V
  hfloss FILE SHARD B T NH [PREFIX]
      the mean cross-entropy of the first batch of SHARD under the GPT-2 in
      FILE, computed in float64 PyTorch the way Hugging Face's GPT2LMHeadModel
      computes it (Conv1D: x @ W + b with W [in, out]; q, k, v split from
      c_attn's output; tanh GELU; logits from the tied wte), independently of
      gcompile's layout: what ./train --init FILE must give at step 1
  gen-llama OUT --L --C --V --NH --NKV --F [--seed S] [--dtype D] [--tied 1]
      random tensors named and laid out as Hugging Face's Llama checkpoints
  llamaloss FILE SHARD B T NH NKV [THETA [EPS]]
      the first batch's loss under that Llama, float64 PyTorch, as
      LlamaForCausalLM computes it (independent of gcompile and its reference)
"""
import json
import math
import struct
import sys

import numpy as np

DT = {"F32": (np.float32, 4), "F16": (np.float16, 2), "BF16": (None, 2), "F64": (np.float64, 8),
      "I64": (np.int64, 8)}


def to_bf16_bits(x):
    """float32 array -> uint16 bf16 bits, round to nearest even (no NaNs here)."""
    u = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def from_bf16_bits(h):
    return (h.astype(np.uint32) << 16).view(np.float32)


def encode(arr, dtype):
    """(bytes, the fp32 values the file then holds)"""
    a = np.ascontiguousarray(arr, dtype=np.float32)
    if dtype == "F32":
        return a.tobytes(), a
    if dtype == "F16":
        h = a.astype(np.float16)
        return h.tobytes(), h.astype(np.float32)
    if dtype == "BF16":
        h = to_bf16_bits(a)
        return h.tobytes(), from_bf16_bits(h)
    raise SystemExit("dtype " + dtype)


def write(path, tensors, metadata=None, order=None):
    """tensors: {name: (dtype, shape, bytes)}; data in `order` (default: sorted names)."""
    header, blobs, at = {}, [], 0
    if metadata is not None:
        header["__metadata__"] = metadata
    for name in (order or sorted(tensors)):
        dtype, shape, data = tensors[name]
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [at, at + len(data)]}
        blobs.append(data)
        at += len(data)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def read(path):
    with open(path, "rb") as f:
        buf = f.read()
    (n,) = struct.unpack("<Q", buf[:8])
    header = json.loads(buf[8:8 + n])
    data = buf[8 + n:]
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        b, end = e["data_offsets"]
        out[name] = (e["dtype"], tuple(e["shape"]), data[b:end])
    return header, out


def gen(args):
    opt = {"--seed": "1", "--dtype": "F32", "--prefix": "transformer.", "--llmc": None, "--buffers": "1"}
    i = 0
    while i < len(args):
        opt[args[i]] = args[i + 1]
        i += 2
    L, C, V, Vp, maxT, NH = (int(opt[k]) for k in ("--L", "--C", "--V", "--Vp", "--maxT", "--NH"))
    rng = np.random.default_rng(int(opt["--seed"]))
    dt, pre = opt["--dtype"], opt["--prefix"]
    if pre == "none":
        pre = ""
    t, vals = {}, {}

    def add(name, arr, dtype=dt):
        data, v = encode(arr, dtype)
        t[pre + name] = (dtype, arr.shape, data)
        vals[name] = v.reshape(arr.shape)

    def w(*shape):
        return (rng.standard_normal(shape) * 0.05).astype(np.float32)

    add("wte.weight", w(V, C))
    add("wpe.weight", w(maxT, C))
    for l in range(L):
        h = "h.%d." % l
        add(h + "ln_1.weight", 1 + w(C))
        add(h + "ln_1.bias", w(C))
        add(h + "attn.c_attn.weight", w(C, 3 * C))      # Conv1D: [in, out]
        add(h + "attn.c_attn.bias", w(3 * C))
        add(h + "attn.c_proj.weight", w(C, C))
        add(h + "attn.c_proj.bias", w(C))
        add(h + "ln_2.weight", 1 + w(C))
        add(h + "ln_2.bias", w(C))
        add(h + "mlp.c_fc.weight", w(C, 4 * C))
        add(h + "mlp.c_fc.bias", w(4 * C))
        add(h + "mlp.c_proj.weight", w(4 * C, C))
        add(h + "mlp.c_proj.bias", w(C))
        if opt["--buffers"] == "1":
            mask = np.tril(np.ones((maxT, maxT), np.float32)).reshape(1, 1, maxT, maxT)
            add(h + "attn.bias", mask, "F32")            # a buffer, no parameter
    add("ln_f.weight", 1 + w(C))
    add("ln_f.bias", w(C))
    write(opt["OUT"], t, {"format": "pt"})
    if opt["--llmc"]:
        hdr = np.zeros(256, np.int32)
        hdr[:8] = [20240326, 3, maxT, V, L, NH, C, Vp]
        wte = np.zeros((Vp, C), np.float32)
        wte[:V] = vals["wte.weight"]
        parts = [wte, vals["wpe.weight"]]
        per = [("ln_1.weight", False), ("ln_1.bias", False), ("attn.c_attn.weight", True),
               ("attn.c_attn.bias", False), ("attn.c_proj.weight", True), ("attn.c_proj.bias", False),
               ("ln_2.weight", False), ("ln_2.bias", False), ("mlp.c_fc.weight", True),
               ("mlp.c_fc.bias", False), ("mlp.c_proj.weight", True), ("mlp.c_proj.bias", False)]
        for name, tr in per:
            for l in range(L):
                v = vals["h.%d.%s" % (l, name)]
                parts.append(v.T if tr else v)
        parts += [vals["ln_f.weight"], vals["ln_f.bias"]]
        with open(opt["--llmc"], "wb") as f:
            f.write(hdr.tobytes())
            for p in parts:
                f.write(np.ascontiguousarray(p, np.float32).tobytes())


def cmp(a, b):
    _, x = read(a)
    _, y = read(b)
    if sorted(x) != sorted(y):
        print("names differ:", sorted(set(x) ^ set(y))[:5])
        return 1
    bad = [n for n in x if x[n] != y[n]]
    if bad:
        print("%d tensors differ, e.g. %s: %s vs %s" % (len(bad), bad[0], x[bad[0]][:2], y[bad[0]][:2]))
        return 1
    print("same %d tensors" % len(x))
    return 0


def close(a, b, tol):
    _, x = read(a)
    _, y = read(b)
    if sorted(x) != sorted(y):
        print("names differ:", sorted(set(x) ^ set(y))[:5])
        return 1
    worst, where = 0.0, None
    for n in x:
        if x[n][:2] != y[n][:2] or x[n][0] != "F32":
            print("tensor %s: %s vs %s" % (n, x[n][:2], y[n][:2]))
            return 1
        d = np.abs(np.frombuffer(x[n][2], np.float32).astype(np.float64) -
                   np.frombuffer(y[n][2], np.float32))
        if d.size and d.max() > worst:
            worst, where = float(d.max()), n
    print("max |difference| %.3g (%s), tolerance %s" % (worst, where, tol))
    return 0 if worst <= float(tol) else 1


def bf16of(a, b):
    _, x = read(a)
    _, y = read(b)
    for n, (dt, shape, data) in x.items():
        want = to_bf16_bits(np.frombuffer(data, np.float32)).tobytes()
        if y[n] != ("BF16", shape, want):
            print("tensor %s is not the BF16 rounding" % n)
            return 1
    print("%d tensors rounded to BF16" % len(x))
    return 0


def corrupt(src, kind, dst, arg=None):
    """KINDS: truncate, huge_header, header_past_end, short, bad_json, not_object,
    duplicate, overlap, gap, trailing, missing NAME, shape NAME, dtype NAME (I64),
    unknown_dtype NAME, size_mismatch NAME, offsets_reversed NAME, metadata_nonstring"""
    with open(src, "rb") as f:
        buf = f.read()
    (n,) = struct.unpack("<Q", buf[:8])
    header = json.loads(buf[8:8 + n])
    data = buf[8 + n:]

    def emit(h, d=data, raw=None):
        hb = raw if raw is not None else json.dumps(h, separators=(",", ":")).encode()
        with open(dst, "wb") as f:
            f.write(struct.pack("<Q", len(hb)) + hb + d)

    names = [k for k in header if k != "__metadata__"]
    by_begin = sorted(names, key=lambda k: header[k]["data_offsets"][0])
    if kind == "truncate":
        with open(dst, "wb") as f:
            f.write(buf[:len(buf) - 1000])
    elif kind == "huge_header":
        with open(dst, "wb") as f:
            f.write(struct.pack("<Q", 1 << 40) + buf[8:])
    elif kind == "header_past_end":
        with open(dst, "wb") as f:
            f.write(struct.pack("<Q", len(buf)) + buf[8:])
    elif kind == "short":
        with open(dst, "wb") as f:
            f.write(buf[:5])
    elif kind == "bad_json":
        raw = json.dumps(header, separators=(",", ":")).encode()
        emit(None, raw=raw.replace(b'"data_offsets":', b'"data_offsets" ', 1))   # a ':' missing
    elif kind == "not_object":
        emit(None, raw=b"[1, 2, 3]")
    elif kind == "duplicate":
        raw = json.dumps(header, separators=(",", ":")).encode()
        k = by_begin[0]
        entry = json.dumps({k: header[k]}, separators=(",", ":")).encode()[1:-1]
        emit(None, raw=raw[:-1] + b"," + entry + b"}")
    elif kind == "overlap":   # the second tensor starts 4 bytes early
        k = by_begin[1]
        b, e = header[k]["data_offsets"]
        header[k]["data_offsets"] = [b - 4, e - 4]
        emit(header)
    elif kind == "gap":       # 64 unclaimed bytes before the last tensor
        k = by_begin[-1]
        b, e = header[k]["data_offsets"]
        header[k]["data_offsets"] = [b + 64, e + 64]
        emit(header, data[:b] + b"\0" * 64 + data[b:])
    elif kind == "trailing":
        emit(header, data + b"\0" * 8)
    elif kind == "missing":
        k = header[arg]
        del header[arg]       # its bytes now belong to no tensor: give them to a dummy
        header["unused.dummy." + arg] = {"dtype": "U8", "shape": [k["data_offsets"][1] - k["data_offsets"][0]],
                                  "data_offsets": k["data_offsets"]}
        emit(header)
    elif kind == "shape":     # same bytes, the axes swapped or regrouped
        s = header[arg]["shape"]
        header[arg]["shape"] = s[::-1] if len(s) == 2 and s[0] != s[1] else [s[0] * (s[1] if len(s) > 1 else 1) // 2, 2]
        emit(header)
    elif kind == "dtype":     # the same bytes read as half as many I64
        e = header[arg]
        nb = e["data_offsets"][1] - e["data_offsets"][0]
        e["dtype"], e["shape"] = "I64", [nb // 8]
        emit(header)
    elif kind == "unknown_dtype":
        header[arg]["dtype"] = "Q7"
        emit(header)
    elif kind == "size_mismatch":
        header[arg]["shape"] = [header[arg]["shape"][0] + 1] + header[arg]["shape"][1:]
        emit(header)
    elif kind == "offsets_reversed":
        b, e = header[arg]["data_offsets"]
        header[arg]["data_offsets"] = [e, b]
        emit(header)
    elif kind == "metadata_nonstring":
        header["__metadata__"] = {"format": 3}
        emit(header)
    else:
        raise SystemExit("unknown corruption " + kind)


def shard(path, V, ntok, seed="1"):
    rng = np.random.default_rng(int(seed))
    hdr = np.zeros(256, np.int32)
    hdr[:3] = [20240520, 1, int(ntok)]
    with open(path, "wb") as f:
        f.write(hdr.tobytes())
        f.write(rng.integers(0, int(V), int(ntok)).astype(np.uint16).tobytes())


def hfloss(path, shard_path, B, T, NH, prefix="transformer."):
    import torch
    import torch.nn.functional as F
    B, T, NH = int(B), int(T), int(NH)
    if prefix == "none":
        prefix = ""
    _, ts = read(path)

    def p(name):
        dt, shape, data = ts[prefix + name]
        if dt == "F32":
            a = np.frombuffer(data, np.float32)
        elif dt == "F16":
            a = np.frombuffer(data, np.float16).astype(np.float32)
        else:
            a = from_bf16_bits(np.frombuffer(data, np.uint16))
        return torch.tensor(a.reshape(shape), dtype=torch.float64)

    with open(shard_path, "rb") as f:
        f.seek(1024)
        tok = np.frombuffer(f.read(2 * (B * T + 1)), np.uint16).astype(np.int64)
    inp = torch.tensor(tok[:-1].reshape(B, T))
    tgt = torch.tensor(tok[1:].reshape(B, T))
    wte = p("wte.weight")
    x = wte[inp] + p("wpe.weight")[:T]
    C = x.shape[-1]
    hs = C // NH
    L = sum(1 for k in ts if k.startswith(prefix + "h.") and k.endswith(".ln_1.weight"))
    mask = torch.ones(T, T, dtype=torch.bool).tril()

    def conv1d(x, name):   # Hugging Face's Conv1D: x @ weight + bias, weight [in, out]
        return x @ p(name + ".weight") + p(name + ".bias")

    def ln(x, name):
        return F.layer_norm(x, (C,), p(name + ".weight"), p(name + ".bias"), 1e-5)

    for l in range(L):
        h = "h.%d." % l
        q, k, v = conv1d(ln(x, h + "ln_1"), h + "attn.c_attn").split(C, dim=2)
        q, k, v = (z.view(B, T, NH, hs).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-1, -2)) / math.sqrt(hs)
        att = att.masked_fill(~mask, float("-inf")).softmax(-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, C)
        x = x + conv1d(y, h + "attn.c_proj")
        m = F.gelu(conv1d(ln(x, h + "ln_2"), h + "mlp.c_fc"), approximate="tanh")
        x = x + conv1d(m, h + "mlp.c_proj")
    logits = ln(x, "ln_f") @ wte.T
    loss = F.cross_entropy(logits.reshape(B * T, -1), tgt.reshape(-1))
    print("%.9f" % loss.item())


def gen_llama(args):
    """gen-llama OUT --L --C --V --NH --NKV --F [--seed] [--dtype] [--tied 1]: Hugging Face's Llama names
    and nn.Linear layout ([out, in]); --tied 1 leaves lm_head.weight out (Llama 3.2 1B's file)."""
    opt = {"--seed": "1", "--dtype": "F32", "--tied": "0"}
    for i in range(0, len(args), 2):
        opt[args[i]] = args[i + 1]
    L, C, V, NH, NKV, F = (int(opt[k]) for k in ("--L", "--C", "--V", "--NH", "--NKV", "--F"))
    hs = C // NH
    rng = np.random.default_rng(int(opt["--seed"]))
    t = {}

    def add(name, shape, base=0.0, scale=0.05):
        a = (base + rng.standard_normal(shape) * scale).astype(np.float32)
        data, _ = encode(a, opt["--dtype"])
        t[name] = (opt["--dtype"], shape, data)

    add("model.embed_tokens.weight", (V, C))
    for l in range(L):
        p = "model.layers.%d." % l
        add(p + "input_layernorm.weight", (C,), 1.0, 0.1)
        add(p + "self_attn.q_proj.weight", (NH * hs, C))
        add(p + "self_attn.k_proj.weight", (NKV * hs, C))
        add(p + "self_attn.v_proj.weight", (NKV * hs, C))
        add(p + "self_attn.o_proj.weight", (C, NH * hs))
        add(p + "post_attention_layernorm.weight", (C,), 1.0, 0.1)
        add(p + "mlp.gate_proj.weight", (F, C))
        add(p + "mlp.up_proj.weight", (F, C))
        add(p + "mlp.down_proj.weight", (C, F))
    add("model.norm.weight", (C,), 1.0, 0.1)
    if opt["--tied"] != "1":
        add("lm_head.weight", (V, C))
    write(opt["OUT"], t, {"format": "pt"})


def llamaloss(path, shard_path, B, T, NH, NKV, theta="500000", eps="1e-5"):
    """The first batch's mean cross-entropy under the Llama in FILE, float64, as Hugging Face's
    LlamaForCausalLM computes it: RMSNorm x * rsqrt(mean(x^2) + eps) * w; rotary embeddings in the
    rotate-half layout (cos/sin of positions 0..T-1 times theta^(-2i/hs), the two halves of each head);
    repeat_kv (query head h reads key/value head h // (NH/NKV)); down(silu(gate(x)) * up(x)); a final
    RMSNorm; lm_head (or, absent, the tied embedding)."""
    import torch
    import torch.nn.functional as F
    B, T, NH, NKV, theta, eps = int(B), int(T), int(NH), int(NKV), float(theta), float(eps)
    _, ts = read(path)

    def p(name):
        dt, shape, data = ts[name]
        a = {"F32": lambda: np.frombuffer(data, np.float32), "F16": lambda: np.frombuffer(data, np.float16),
             "BF16": lambda: from_bf16_bits(np.frombuffer(data, np.uint16))}[dt]()
        return torch.tensor(a.astype(np.float32).reshape(shape), dtype=torch.float64)

    with open(shard_path, "rb") as f:
        f.seek(1024)
        tok = np.frombuffer(f.read(2 * (B * T + 1)), np.uint16).astype(np.int64)
    inp = torch.tensor(tok[:-1].reshape(B, T))
    tgt = torch.tensor(tok[1:].reshape(B, T))
    emb = p("model.embed_tokens.weight")
    x = emb[inp]
    C = x.shape[-1]
    hs, rep = C // NH, NH // NKV
    L = sum(1 for k in ts if k.endswith(".input_layernorm.weight"))
    inv = 1.0 / theta ** (torch.arange(0, hs, 2, dtype=torch.float64) / hs)
    fr = torch.arange(T, dtype=torch.float64)[:, None] * inv[None]
    cos, sin = torch.cat([fr, fr], -1).cos(), torch.cat([fr, fr], -1).sin()

    def rot(z):
        z1, z2 = z[..., :hs // 2], z[..., hs // 2:]
        return z * cos + torch.cat([-z2, z1], -1) * sin

    def rms(z, w):
        return z * torch.rsqrt(z.pow(2).mean(-1, keepdim=True) + eps) * w

    mask = torch.ones(T, T, dtype=torch.bool).tril()
    for l in range(L):
        q_ = "model.layers.%d." % l
        h = rms(x, p(q_ + "input_layernorm.weight"))
        q = (h @ p(q_ + "self_attn.q_proj.weight").T).view(B, T, NH, hs).transpose(1, 2)
        k = (h @ p(q_ + "self_attn.k_proj.weight").T).view(B, T, NKV, hs).transpose(1, 2)
        v = (h @ p(q_ + "self_attn.v_proj.weight").T).view(B, T, NKV, hs).transpose(1, 2)
        q, k = rot(q), rot(k)
        k = k[:, :, None].expand(B, NKV, rep, T, hs).reshape(B, NH, T, hs)
        v = v[:, :, None].expand(B, NKV, rep, T, hs).reshape(B, NH, T, hs)
        att = ((q @ k.transpose(-1, -2)) / math.sqrt(hs)).masked_fill(~mask, float("-inf")).softmax(-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, C)
        x = x + y @ p(q_ + "self_attn.o_proj.weight").T
        h = rms(x, p(q_ + "post_attention_layernorm.weight"))
        g = F.silu(h @ p(q_ + "mlp.gate_proj.weight").T) * (h @ p(q_ + "mlp.up_proj.weight").T)
        x = x + g @ p(q_ + "mlp.down_proj.weight").T
    head = p("lm_head.weight") if "lm_head.weight" in ts else emb
    logits = rms(x, p("model.norm.weight")) @ head.T
    loss = F.cross_entropy(logits.reshape(B * T, -1), tgt.reshape(-1))
    print("%.9f" % loss.item())


def main():
    cmd, rest = sys.argv[1], sys.argv[2:]
    if cmd == "gen":
        gen(["OUT", rest[0]] + rest[1:])
    elif cmd == "cmp":
        sys.exit(cmp(*rest))
    elif cmd == "eq":
        _, t = read(rest[0])
        sys.exit(0 if t[rest[1]] == t[rest[2]] else 1)
    elif cmd == "close":
        sys.exit(close(*rest))
    elif cmd == "bf16of":
        sys.exit(bf16of(*rest))
    elif cmd == "corrupt":
        corrupt(*rest)
    elif cmd == "shard":
        shard(*rest)
    elif cmd == "hfloss":
        hfloss(*rest)
    elif cmd == "gen-llama":
        gen_llama(["OUT", rest[0]] + rest[1:])
    elif cmd == "llamaloss":
        llamaloss(*rest)
    else:
        raise SystemExit(__doc__)


if __name__ == "__main__":
    main()
