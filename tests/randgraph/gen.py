"""Random valid training graphs for gcompile, and from the SAME spec an
independent float64 PyTorch program (tests/randgraph; issue 20).

A spec is a JSON-able dict (the shrinker edits it, regression graphs carry it
in their first line):

  seed     the generator seed it came from
  dims     {"B", "T", "V", "L"?}: the named dims of the graph (literal
           numbers elsewhere)
  params   [{"name", "shape", "init": [kind, std], "decay"}]; a layer-stacked
           parameter's shape starts with L and is read as name[l] in the loop
  pre, loop, post
           node lists: before, inside (unrolled L times) and after the loop.
           A node is {"op", "in": [refs], "attr": {...}, "out": [names],
           "shape": [out shapes]}; a ref is a tensor name, "tokens",
           "targets", a parameter "p3" or a layer slice "p3[l]". "x" is the
           loop-carried name: pre's last node is `x = ...` (op "alias"),
           the loop body ends with `x = ...`.
  loss     the name of the scalar to minimize
  hyper    {"lr", "beta1", "beta2", "eps", "wd", "steps"}

Op coverage is table-driven: OPS below maps each primitive op of ir/ops.def
to its DSL and PyTorch text; `uncovered(opsdef)` lists ops.def primitives the
table lacks (printed by the runner, so a new op shows up until it is added
here).  The PyTorch side is written from docs/grammar.md's semantics, never
from gcompile's IR or output.
"""

import json
import math
import random
import re

# ------------------------------------------------------------------ op table

def _attrs_dsl(node, names):
    parts = []
    for k in names:
        if k in node["attr"]:
            v = node["attr"][k]
            if isinstance(v, list):
                v = "[" + ", ".join(str(i) for i in v) + "]"
            parts.append(f"{k}={v}" if k not in ("shape", "perm") else str(v))
    return parts


def _axis_dsl(node):
    """`, axis=A` (by name or, half the time, positionally) unless absent"""
    if "axis" not in node["attr"]:
        return ""
    return (", " if node["attr"].get("pos") else ", axis=") + str(node["attr"]["axis"])


def _call(opname, node, attrs=()):
    args = list(node["in"]) + _attrs_dsl(node, attrs)
    return f"{opname}({', '.join(args)})"


# name -> (dsl(node) -> expression text, torch(node, ins) -> expression text)
OPS = {
    "embedding": (lambda n: _call("embedding", n),
                  lambda n, i: f"{i[0]}[{i[1]}]"),
    "matmul": (lambda n: _call("matmul", n, ("ta", "tb")),
               lambda n, i: f"mm({i[0]}, {i[1]}, {n['attr'].get('ta', 0)}, {n['attr'].get('tb', 0)})"),
    "add": (lambda n: (f"{n['in'][0]} + {n['in'][1]}" if n["attr"].get("plus") else _call("add", n)),
            lambda n, i: f"{i[0]} + {i[1]}"),
    "scale": (lambda n: f"scale({n['in'][0]}, {n['attr']['s']!r})",
              lambda n, i: f"({n['attr']['s']!r}) * {i[0]}"),
    "gelu": (lambda n: _call("gelu", n),
             lambda n, i: f"F.gelu({i[0]}, approximate='tanh')"),
    "layernorm": (lambda n: _call("layernorm", n, ("eps",)),
                  lambda n, i: f"F.layer_norm({i[0]}, ({i[0]}.shape[-1],), {i[1]}, {i[2]}, {n['attr'].get('eps', 1e-5)!r})"),
    "softmax": (lambda n: _call("softmax", n),
                lambda n, i: f"torch.softmax({i[0]}, -1)"),
    "causal_mask": (lambda n: _call("causal_mask", n),
                    lambda n, i: f"cmask({i[0]})"),
    "cross_entropy": (lambda n: _call("cross_entropy", n, ("n",)),
                      lambda n, i: f"ce({i[0]}, {i[1]}, {n['attr'].get('n', 0)})"),
    "reshape": (lambda n: f"reshape({n['in'][0]}, [{', '.join(str(v) for v in n['attr']['shape'])}])",
                lambda n, i: f"{i[0]}.reshape([{', '.join(str(v) for v in n['attr']['shape'])}])"),
    "permute": (lambda n: f"permute({n['in'][0]}, [{', '.join(str(v) for v in n['attr']['perm'])}])",
                lambda n, i: f"{i[0]}.permute({n['attr']['perm']})"),
    "split": (lambda n: f"split({n['in'][0]}, {n['attr']['parts']}{_axis_dsl(n)})",
              lambda n, i: f"splitax({i[0]}, {n['attr']['parts']}, {n['attr'].get('axis', 0)})"),
    "slice": (lambda n: f"slice({n['in'][0]}, {n['attr']['start']}, {n['attr']['len']}{_axis_dsl(n)})",
              lambda n, i: f"torch.narrow({i[0]}, {n['attr'].get('axis', 0)}, {n['attr']['start']}, "
                           f"{n['attr']['len']})"),
    "concat": (lambda n: f"concat({n['in'][0]}, {n['in'][1]}{_axis_dsl(n)})",
               lambda n, i: f"torch.cat([{i[0]}, {i[1]}], {n['attr'].get('axis', 0)})"),
    "repeat": (lambda n: f"repeat({n['in'][0]}, {n['attr']['n']}{_axis_dsl(n)})",
               lambda n, i: f"torch.repeat_interleave({i[0]}, {n['attr']['n']}, {n['attr'].get('axis', 0)})"),
    "mean": (lambda n: f"mean({n['in'][0]})", lambda n, i: f"{i[0]}.mean(-1)"),
    "rope": (lambda n: (f"rope({n['in'][0]}, theta={n['attr']['theta']!r})" if "theta" in n["attr"]
                        else f"rope({n['in'][0]})"),
             lambda n, i: f"rope({i[0]}, {n['attr'].get('theta', 500000)!r})"),
    "mul": (lambda n: (f"{n['in'][0]} * {n['in'][1]}" if n["attr"].get("plus") else _call("mul", n)),
            lambda n, i: f"{i[0]} * {i[1]}"),
    "sub": (lambda n: (f"{n['in'][0]} - {n['in'][1]}" if n["attr"].get("plus") else _call("sub", n)),
            lambda n, i: f"{i[0]} - {i[1]}"),
    "silu": (lambda n: _call("silu", n), lambda n, i: f"F.silu({i[0]})"),
    "sigmoid": (lambda n: _call("sigmoid", n), lambda n, i: f"torch.sigmoid({i[0]})"),
    "relu": (lambda n: _call("relu", n), lambda n, i: f"torch.relu({i[0]})"),
    "tanh": (lambda n: _call("tanh", n), lambda n, i: f"torch.tanh({i[0]})"),
    "gelu_erf": (lambda n: _call("gelu_erf", n), lambda n, i: f"F.gelu({i[0]})"),
    "rmsnorm": (lambda n: _call("rmsnorm", n, ("eps",)),
                lambda n, i: f"({i[0]} / torch.sqrt(({i[0]} * {i[0]}).mean(-1, keepdim=True) + "
                             f"{n['attr'].get('eps', 1e-5)!r}) * {i[1]})"),
    # index: `p[l]` of a layer-stacked parameter in a loop (a ref, not a node)
    "alias": (lambda n: n["in"][0], lambda n, i: i[0]),
}
# ops.def primitives covered without a node kind of their own
COVERED_AS_REFS = {"index": "p[l] of layer-stacked parameters in loops"}


def uncovered(opsdef_text):
    """ops.def primitives (before the internal-ops marker) the table lacks."""
    prim = opsdef_text.split("internal ops")[0]
    names = re.findall(r'^OP\(\s*\w+\s*,\s*"(\w+)"', prim, re.M)
    return [n for n in names if n not in OPS and n not in COVERED_AS_REFS]


# ------------------------------------------------------------------ generator

class Gen:
    """Draws one spec. Blocks take the stream tensor (shape [B, T, c]) and
    return a new one; they add nodes to the current section."""

    def __init__(self, seed, size=None):
        self.r = random.Random(seed)
        r = self.r
        self.seed = seed
        B = r.choice([1, 2, 2, 3, 4])
        T = r.choice([1, 2, 3, 4, 5, 7])
        V = r.choice([3, 5, 7, 8, 11, 13])
        self.dims = {"B": B, "T": T, "V": V}
        self.params, self.nodes = [], {"pre": [], "loop": [], "post": []}
        self.sec = "pre"
        self.pool = {"pre": [], "loop": [], "post": []}   # (name, shape) per section
        self.ntmp = 0
        self.size = size if size is not None else r.randint(2, 7)
        self.nomicro = False    # a graph that splits along B cannot run B/K rows

    # -- helpers
    def name(self):
        self.ntmp += 1
        return f"t{self.ntmp}"

    def in_loop(self):
        return self.sec == "loop"

    def node(self, op, ins, shapes, **attr):
        outs = [self.name() for _ in shapes]
        self.nodes[self.sec].append({"op": op, "in": list(ins), "attr": attr, "out": outs,
                                     "shape": [list(s) for s in shapes]})
        for o, s in zip(outs, shapes):
            self.pool[self.sec].append((o, tuple(s)))
        return outs if len(outs) > 1 or op == "split" else outs[0]

    def visible(self):
        v = list(self.pool["pre"])
        if self.sec == "loop":
            v += self.pool["loop"]
        if self.sec == "post":
            v += self.pool["post"]
        if self.sec != "pre" and "x" in self.carry_shape:
            v.append(("x", self.carry_shape["x"]))
        return v

    def pick_same(self, shape, avoid=None):
        c = [n for n, s in self.visible() if s == tuple(shape) and n != avoid]
        return self.r.choice(c) if c else None

    def param(self, shape, kind="normal", std=None, decay=None, stack=None, reuse=0.25):
        r = self.r
        shape = list(shape)
        if stack is None:
            stack = self.in_loop() and r.random() < 0.8
        full = ([self.dims["L"]] if stack else []) + shape
        if r.random() < reuse:   # one param in several roles
            for p in self.params:
                if p["shape"] == full and p["init"][0] == kind:
                    return p["name"] + ("[l]" if stack else "")
        if std is None:
            std = 1.0 / math.sqrt(max(1, shape[-1] if len(shape) > 1 else 1))
        if decay is None:
            decay = r.random() < 0.7
        name = f"p{len(self.params)}"
        self.params.append({"name": name, "shape": full, "init": [kind, std], "decay": decay})
        return name + ("[l]" if stack else "")

    # -- blocks: (x, c) -> new stream name; shapes [B, T, c]
    def BT(self, c):
        return (self.dims["B"], self.dims["T"], c)

    def linear(self, x, c, n=None, bias=None):
        r = self.r
        if n is None:
            n = c if self.in_loop() else r.choice([c, c, 1, 2, 3, 5, 6, 8])
        if r.random() < 0.5:
            w = self.param([n, c])
            y = self.node("matmul", [x, w], [self.BT(n)], tb=1)
        else:
            w = self.param([c, n])
            y = self.node("matmul", [x, w], [self.BT(n)])
        if bias if bias is not None else r.random() < 0.6:
            b = self.param([n], std=0.2)
            y = self.node("add", [y, b], [self.BT(n)], plus=r.random() < 0.5)
        return y, n

    def b_linear(self, x, c):
        return self.linear(x, c)

    def b_gelu(self, x, c):
        return self.node("gelu", [x], [self.BT(c)]), c

    def b_scale(self, x, c):
        return self.node("scale", [x], [self.BT(c)], s=self.r.choice([-0.5, 0.7, 1.5, 2.0, -1.25])), c

    def b_softmax(self, x, c):
        return self.node("softmax", [x], [self.BT(c)]), c

    def b_act(self, x, c):
        op = self.r.choice(["silu", "sigmoid", "relu", "tanh", "gelu_erf"])
        return self.node(op, [x], [self.BT(c)]), c

    def b_rmsnorm(self, x, c):
        kw = {"eps": 1e-5} if self.r.random() < 0.3 else {}
        return self.node("rmsnorm", [x, self.param([c], kind="ones", std=0.2)], [self.BT(c)], **kw), c

    def b_sub(self, x, c):
        """x - y: another tensor of x's shape, or a broadcast [c] parameter"""
        y = self.pick_same(self.BT(c), avoid=x) or self.param([c], std=0.3)
        return self.node("sub", [x, y], [self.BT(c)], plus=self.r.random() < 0.5), c

    def b_swiglu(self, x, c):
        """silu(x W1) * (x W3), then W2 back to c (Llama's MLP)"""
        r = self.r
        h = r.choice([2 * c, c + 1, 3])
        a, _ = self.linear(x, c, n=h, bias=False)
        g, _ = self.linear(x, c, n=h, bias=False)
        a = self.node("silu", [a], [self.BT(h)])
        y = self.node("mul", [a, g], [self.BT(h)], plus=r.random() < 0.5)
        return self.linear(y, h, n=c, bias=False)

    def b_layernorm(self, x, c):
        w = self.param([c], kind="ones", std=0.2)
        b = self.param([c], std=0.2)
        kw = {"eps": 1e-5} if self.r.random() < 0.3 else {}
        return self.node("layernorm", [x, w, b], [self.BT(c)], **kw), c

    def b_residual(self, x, c):
        """x + f(x): f any shape-preserving block chain; the known case
        x + (matmul(x, W) + b) among them."""
        r = self.r
        kind = r.choice(["lin", "mlp", "attn", "any", "other", "gqa"])
        if kind == "lin":
            y, _ = self.linear(x, c, n=c)
        elif kind == "mlp":
            y, _ = self.b_mlp(x, c)
        elif kind == "attn":
            y, _ = self.b_attention(x, c)
        elif kind == "gqa":
            y, _ = self.b_gqa(x, c)
        elif kind == "other":
            y = self.pick_same(self.BT(c), avoid=x) or x
            y, _ = self.b_gelu(y, c)
        else:
            y, c2 = self.block(x, c, shape_keep=True)
        if r.random() < 0.5:
            return self.node("add", [x, y], [self.BT(c)], plus=r.random() < 0.7), c
        return self.node("add", [y, x], [self.BT(c)], plus=r.random() < 0.7), c

    def b_mlp(self, x, c):
        r = self.r
        h = r.choice([2 * c, 4 * c, c + 1, 3])
        y, _ = self.linear(x, c, n=h, bias=r.random() < 0.8)
        y = self.node("gelu", [y], [self.BT(h)])
        y, _ = self.linear(y, h, n=c)
        return y, c

    def b_bcast(self, x, c):
        """broadcast add: a [c] or [T, c] param, or positional slice(wpe, 0, T)"""
        r = self.r
        T = self.dims["T"]
        k = r.randint(0, 2)
        if k == 0:
            p = self.param([c], std=0.3)
        elif k == 1:
            p = self.param([T, c], std=0.3)
        else:
            rows = T + r.randint(0, 3)
            p = self.param([rows, c], std=0.3, stack=False)
            p = self.node("slice", [p], [(T, c)], start=r.randint(0, rows - T), len=T)
        return self.node("add", [x, p], [self.BT(c)], plus=r.random() < 0.5), c

    def b_attention(self, x, c):
        """qkv projection, heads by reshape/permute/split, scores, causal mask
        (usually) + softmax, weighted sum, heads back, output projection"""
        r = self.r
        B, T = self.dims["B"], self.dims["T"]
        nh = r.choice([1, 2, 3])
        hs = r.choice([1, 2, 3, 4])
        D = nh * hs
        w = self.param([3 * D, c])
        qkv = self.node("matmul", [x, w], [(B, T, 3 * D)], tb=1)
        if r.random() < 0.5:
            qkv = self.node("add", [qkv, self.param([3 * D], std=0.2)], [(B, T, 3 * D)], plus=True)
        if r.random() < 0.3:   # Hugging Face's way: split the channels (a copy), then heads
            parts = self.node("split", [qkv], [(B, T, D)] * 3, parts=3, **self.axattr(2, 3))
            q, k, v = (self.node("permute", [self.node("reshape", [t], [(B, T, nh, hs)], shape=["B", T, nh, hs])],
                                 [(B, nh, T, hs)], perm=[0, 2, 1, 3]) for t in parts)
        else:
            qkv = self.node("reshape", [qkv], [(B, T, 3, nh, hs)], shape=["B", T, 3, nh, hs])
            qkv = self.node("permute", [qkv], [(3, B, nh, T, hs)], perm=[2, 0, 3, 1, 4])
            ax = {"axis": -5} if r.random() < 0.2 else {}     # -5 is axis 0: still the view
            q, k, v = self.node("split", [qkv], [(B, nh, T, hs)] * 3, parts=3, **ax)
        if hs % 2 == 0 and r.random() < 0.2:   # rope on q and k (the first form no longer matches)
            th = self.theta()
            q = self.node("rope", [q], [(B, nh, T, hs)], **th)
            k = self.node("rope", [k], [(B, nh, T, hs)], **th)
        att = self.node("matmul", [q, k], [(B, nh, T, T)], tb=1)
        att = self.node("scale", [att], [(B, nh, T, T)], s=1.0 / math.sqrt(hs))
        if r.random() < 0.85:
            att = self.node("causal_mask", [att], [(B, nh, T, T)])
        att = self.node("softmax", [att], [(B, nh, T, T)])
        if r.random() < 0.2:    # v read through ta: (v^T)^T
            vt = self.node("permute", [v], [(B, nh, hs, T)], perm=[0, 1, 3, 2])
            y = self.node("matmul", [att, vt], [(B, nh, T, hs)], tb=1)
        else:
            y = self.node("matmul", [att, v], [(B, nh, T, hs)])
        y = self.node("permute", [y], [(B, T, nh, hs)], perm=[0, 2, 1, 3])
        y = self.node("reshape", [y], [(B, T, D)], shape=["B", T, D])
        return self.linear(y, D, n=c)

    def b_viewmm(self, x, c):
        """reshape to rows, matmul (a 2-D b, either orientation), reshape back"""
        r = self.r
        B, T = self.dims["B"], self.dims["T"]
        n = c if self.in_loop() else r.choice([c, 2, 3, 5])
        z = self.node("reshape", [x], [(B * T, c)], shape=["B*T", c])
        if r.random() < 0.5:
            y = self.node("matmul", [z, self.param([c, n])], [(B * T, n)])
        else:
            y = self.node("matmul", [z, self.param([n, c])], [(B * T, n)], tb=1)
        return self.node("reshape", [y], [self.BT(n)], shape=["B", T, n]), n

    def b_chanperm(self, x, c):
        """channels as [a, b] permuted to [b, a] (a permute kernel between views)"""
        r = self.r
        B, T = self.dims["B"], self.dims["T"]
        divs = [a for a in range(2, c) if c % a == 0]
        if not divs:
            return self.b_gelu(x, c)
        a = r.choice(divs)
        y = self.node("reshape", [x], [(B, T, a, c // a)], shape=["B", T, a, c // a])
        y = self.node("permute", [y], [(B, T, c // a, a)], perm=[0, 1, 3, 2])
        return self.node("reshape", [y], [self.BT(c)], shape=["B", T, c]), c

    def b_tokmix(self, x, c):
        """mixing along T: permute to [B, c, T], matmul with a [T, T] param
        (rows = leading dims of a), permute back"""
        B, T = self.dims["B"], self.dims["T"]
        y = self.node("permute", [x], [(B, c, T)], perm=[0, 2, 1])
        if self.r.random() < 0.5:
            y = self.node("matmul", [y, self.param([T, T])], [(B, c, T)])
        else:
            y = self.node("matmul", [y, self.param([T, T])], [(B, c, T)], tb=1)
        return self.node("permute", [y], [self.BT(c)], perm=[0, 2, 1]), c

    def b_ta(self, x, c):
        """a data-dependent matrix M = x^T y (ta=1, batched over B), then z M"""
        r = self.r
        B, T = self.dims["B"], self.dims["T"]
        y = r.choice([n for n, s in self.visible() if len(s) == 3 and s[:2] == (B, T)] or [x])
        c2 = dict(self.visible())[y][2] if y != x else c
        m = self.node("matmul", [x, y], [(B, c, c2)], ta=1)
        m = self.node("scale", [m], [(B, c, c2)], s=round(1.0 / T, 6))
        z = self.pick_same(self.BT(c)) or x
        out = self.node("matmul", [z, m], [self.BT(c2)])
        if self.in_loop() and c2 != c:
            return self.linear(out, c2, n=c)
        return out, c2

    def b_slicemm(self, x, c):
        """row slices of two [B*T, .] views feeding a ta=1 matmul: [c, c2]"""
        r = self.r
        B, T = self.dims["B"], self.dims["T"]
        N = B * T
        y = r.choice([n for n, s in self.visible() if len(s) == 3 and s[:2] == (B, T)] or [x])
        c2 = dict(self.visible())[y][2] if y != x else c
        ln = r.randint(1, T)      # rows inside the first sequence: valid for B/K rows too
        s1, s2 = r.randint(0, T - ln), r.randint(0, T - ln)
        a = self.node("slice", [self.node("reshape", [x], [(N, c)], shape=["B*T", c])], [(ln, c)], start=s1, len=ln)
        b = self.node("slice", [self.node("reshape", [y], [(N, c2)], shape=["B*T", c2])], [(ln, c2)], start=s2, len=ln)
        m = self.node("matmul", [a, b], [(c, c2)], ta=1)
        m = self.node("scale", [m], [(c, c2)], s=round(1.0 / ln, 6))
        out = self.node("matmul", [x, m], [self.BT(c2)])
        if self.in_loop() and c2 != c:
            return self.linear(out, c2, n=c)
        return out, c2

    def b_heads(self, x, c):
        """split into k groups of channels through reshape + permute + split,
        transform two of them, add, project back"""
        r = self.r
        B, T = self.dims["B"], self.dims["T"]
        divs = [k for k in (2, 3, 4) if c % k == 0]
        if not divs:
            return self.b_linear(x, c)
        k = r.choice(divs)
        d = c // k
        y = self.node("reshape", [x], [(B, T, k, d)], shape=["B", T, k, d])
        y = self.node("permute", [y], [(k, B, T, d)], perm=[2, 0, 1, 3])
        parts = self.node("split", [y], [(B, T, d)] * k, parts=k)
        a = self.node("gelu", [parts[0]], [(B, T, d)])
        s = self.node("add", [a, parts[-1]], [(B, T, d)], plus=True)
        return self.linear(s, d, n=c)

    def b_batchsplit(self, x, c):
        """split along B (dim dropped when parts == B): a [T, c] summary of the
        batch rows broadcast back onto x"""
        r = self.r
        B, T = self.dims["B"], self.dims["T"]
        if B < 2:
            return self.b_scale(x, c)
        ax = {"axis": -3} if r.random() < 0.3 else {}       # -3 is axis 0: the view, B dropped
        parts = self.node("split", [x], [(T, c)] * B, parts="B", **ax)
        self.nomicro = True
        s = parts[0]
        for p in parts[1:]:
            s = self.node("add", [s, p], [(T, c)], plus=True)
        s = self.node("scale", [s], [(T, c)], s=round(1.0 / B, 6))
        return self.node("add", [x, s], [self.BT(c)], plus=True), c

    def b_skip(self, x, c):
        """a long skip: x + an earlier tensor of the same shape (fan-out)"""
        y = self.pick_same(self.BT(c), avoid=x)
        if y is None:
            return self.b_gelu(x, c)
        return self.node("add", [x, y], [self.BT(c)], plus=True), c

    # -- issue 22's ops: rope, concat, repeat, mean, split/slice off axis 0
    def ax(self, a, rank):
        """axis a of a rank-`rank` tensor, written as a or a - rank (negative)"""
        return a - rank if self.r.random() < 0.4 else a

    def axattr(self, a, rank):
        return {"axis": self.ax(a, rank), "pos": self.r.random() < 0.3}

    def theta(self):
        t = self.r.choice([None, 10000.0, 100.0, 10.0, 500000.0])
        return {} if t is None else {"theta": t}

    def back_to(self, y, c2, c):
        """y [B, T, c2] back to width c where the stream must keep it (loops)"""
        if self.in_loop() and c2 != c:
            return self.linear(y, c2, n=c)
        return y, c2

    def tokmix_n(self, y, c, n):
        """y [B, n, c] -> [B, T, c] through a [n, T] parameter along the token axis"""
        B, T = self.dims["B"], self.dims["T"]
        z = self.node("permute", [y], [(B, c, n)], perm=[0, 2, 1])
        if self.r.random() < 0.5:
            z = self.node("matmul", [z, self.param([n, T])], [(B, c, T)])
        else:
            z = self.node("matmul", [z, self.param([T, n])], [(B, c, T)], tb=1)
        return self.node("permute", [z], [self.BT(c)], perm=[0, 2, 1])

    def b_rope(self, x, c):
        """rope on the stream ([B, T, c]: positions along T) or on heads
        ([B, nh, T, hs] by reshape + permute, and back); c must be even"""
        r = self.r
        B, T = self.dims["B"], self.dims["T"]
        hsl = [h for h in range(2, c + 1, 2) if c % h == 0]
        if not hsl:
            return self.b_act(x, c)
        if r.random() < 0.4:
            return self.node("rope", [x], [self.BT(c)], **self.theta()), c
        hs = r.choice(hsl)
        nh = c // hs
        y = self.node("reshape", [x], [(B, T, nh, hs)], shape=["B", T, nh, hs])
        if r.random() < 0.2:     # positions along the head axis: valid, if odd
            y = self.node("rope", [y], [(B, T, nh, hs)], **self.theta())
        else:
            y = self.node("permute", [y], [(B, nh, T, hs)], perm=[0, 2, 1, 3])
            y = self.node("rope", [y], [(B, nh, T, hs)], **self.theta())
            y = self.node("permute", [y], [(B, T, nh, hs)], perm=[0, 2, 1, 3])
        return self.node("reshape", [y], [self.BT(c)], shape=["B", T, c]), c

    def heads(self, x, c, w_rows, nh, hs):
        """permute(reshape(matmul(x, W), [B, T, nh, hs]), [0, 2, 1, 3]): (B, nh, T, hs)"""
        B, T = self.dims["B"], self.dims["T"]
        if self.r.random() < 0.7:
            y = self.node("matmul", [x, self.param([w_rows, c])], [(B, T, w_rows)], tb=1)
        else:
            y = self.node("matmul", [x, self.param([c, w_rows])], [(B, T, w_rows)])
        y = self.node("reshape", [y], [(B, T, nh, hs)], shape=["B", T, nh, hs])
        return self.node("permute", [y], [(B, nh, T, hs)], perm=[0, 2, 1, 3])

    def b_gqa(self, x, c):
        """Llama's attention (the fusion's second form): separate q, k, v
        projections to heads, rope on q and k, k and v repeated from NKV to
        NH heads along axis 1 (grouped-query), causal scores, softmax,
        weighted sum, heads back, output projection; variants: no rope, odd
        hs, rope after the repeat, no mask, axis written negative"""
        r = self.r
        B, T = self.dims["B"], self.dims["T"]
        nkv = r.choice([1, 1, 2])
        grp = r.choice([1, 2, 2, 3])
        nh = nkv * grp
        hs = r.choice([2, 2, 4, 3, 1])
        rope = hs % 2 == 0 and r.random() < 0.85
        q = self.heads(x, c, nh * hs, nh, hs)
        k = self.heads(x, c, nkv * hs, nkv, hs)
        v = self.heads(x, c, nkv * hs, nkv, hs)
        late = r.random() < 0.2          # rope after the repeat
        if rope:
            th = self.theta()
            q = self.node("rope", [q], [(B, nh, T, hs)], **th)
            if not late:
                k = self.node("rope", [k], [(B, nkv, T, hs)], **th)
        if grp > 1 or r.random() < 0.2:
            k = self.node("repeat", [k], [(B, nh, T, hs)], n=grp, **self.axattr(1, 4))
            v = self.node("repeat", [v], [(B, nh, T, hs)], n=grp, **self.axattr(1, 4))
        if rope and late:
            k = self.node("rope", [k], [(B, nh, T, hs)], **th)
        att = self.node("matmul", [q, k], [(B, nh, T, T)], tb=1)
        att = self.node("scale", [att], [(B, nh, T, T)], s=1.0 / math.sqrt(hs))
        if r.random() < 0.85:
            att = self.node("causal_mask", [att], [(B, nh, T, T)])
        att = self.node("softmax", [att], [(B, nh, T, T)])
        y = self.node("matmul", [att, v], [(B, nh, T, hs)])
        y = self.node("permute", [y], [(B, T, nh, hs)], perm=[0, 2, 1, 3])
        y = self.node("reshape", [y], [(B, T, nh * hs)], shape=["B", T, nh * hs])
        return self.linear(y, nh * hs, n=c, bias=r.random() < 0.3)

    def b_concat(self, x, c):
        """concat along channels (then a linear), along T (then a [2T, T]
        token mix), or along B (then the two halves sliced back and added)"""
        r = self.r
        B, T = self.dims["B"], self.dims["T"]
        kind = r.choice(["chan", "chan", "tok", "batch"])
        if kind == "chan":
            cand = [(n, s) for n, s in self.visible() if len(s) == 3 and s[:2] == (B, T) and n != x]
            if cand and r.random() < 0.7:
                y, s = r.choice(cand)
                c2 = s[2]
            else:
                y, c2 = self.b_act(x, c)
            a, b = (x, y) if r.random() < 0.5 else (y, x)
            z = self.node("concat", [a, b], [self.BT(c + c2)], **self.axattr(2, 3))
            n = c if self.in_loop() else r.choice([c, c + c2, 3])
            return self.linear(z, c + c2, n=n)
        y = self.pick_same(self.BT(c), avoid=x) or self.node("gelu", [x], [self.BT(c)])
        a, b = (x, y) if r.random() < 0.5 else (y, x)
        if kind == "tok":
            z = self.node("concat", [a, b], [(B, 2 * T, c)], **self.axattr(1, 3))
            if r.random() < 0.3 and c % 2 == 0:   # positions 0..2T-1
                z = self.node("rope", [z], [(B, 2 * T, c)], **self.theta())
            return self.tokmix_n(z, c, 2 * T), c
        z = self.node("concat", [a, b], [(2 * B, T, c)], **self.axattr(0, 3))
        z = self.node("gelu", [z], [(2 * B, T, c)])
        h1 = self.node("slice", [z], [self.BT(c)], start=0, len="B")
        h2 = self.node("slice", [z], [self.BT(c)], start="B", len="B")
        return self.node("add", [h1, h2], [self.BT(c)], plus=True), c

    def b_repeat(self, x, c):
        """repeat_interleave along channels (then a linear back) or along T
        (then a [nT, T] token mix), or along a head axis of size 1"""
        r = self.r
        B, T = self.dims["B"], self.dims["T"]
        n = r.choice([2, 3])
        kind = r.choice(["chan", "tok", "one"])
        if kind == "chan":
            z = self.node("repeat", [x], [self.BT(n * c)], n=n, **self.axattr(2, 3))
            if r.random() < 0.5:
                z = self.node("gelu", [z], [self.BT(n * c)])
            return self.linear(z, n * c, n=c if self.in_loop() else r.choice([c, 2, 5]))
        if kind == "tok":
            z = self.node("repeat", [x], [(B, n * T, c)], n=n, **self.axattr(1, 3))
            return self.tokmix_n(z, c, n * T), c
        # [B, T, c] -> [B, 1, T, c] -> repeat n along axis 1 -> [B, n, T, c] -> a weighted sum over it
        z = self.node("reshape", [x], [(B, 1, T, c)], shape=["B", 1, T, c])
        z = self.node("repeat", [z], [(B, n, T, c)], n=n, **self.axattr(1, 4))
        z = self.node("mul", [z, self.param([n, T, c], std=0.5, stack=False)], [(B, n, T, c)], plus=True)
        z = self.node("permute", [z], [(B, T, c, n)], perm=[0, 2, 3, 1])
        return self.node("mean", [z], [self.BT(c)]), c

    def b_mean(self, x, c):
        """mean over the last axis: group means (reshape [B, T, a, c/a]) mixed
        back by a [a, c] matmul, centring by a broadcast mean (x - mean(x) w),
        or the mean over T repeated back over T"""
        r = self.r
        B, T = self.dims["B"], self.dims["T"]
        kind = r.choice(["group", "centre", "overT"])
        if kind == "group":
            divs = [a for a in range(1, c + 1) if c % a == 0]
            a = r.choice(divs)
            z = self.node("reshape", [x], [(B, T, a, c // a)], shape=["B", T, a, c // a])
            m = self.node("mean", [z], [(B, T, a)])
            y = self.node("matmul", [m, self.param([a, c])], [self.BT(c)])
            return self.node("add", [x, y], [self.BT(c)], plus=True), c
        if kind == "centre":
            m = self.node("mean", [x], [(B, T)])
            m = self.node("reshape", [m], [(B, T, 1)], shape=["B", T, 1])
            y = self.node("matmul", [m, self.param([1, c], kind="ones", std=0.1)], [self.BT(c)])
            return self.node("sub", [x, y], [self.BT(c)], plus=r.random() < 0.5), c
        z = self.node("permute", [x], [(B, c, T)], perm=[0, 2, 1])
        m = self.node("mean", [z], [(B, c)])
        m = self.node("reshape", [m], [(B, 1, c)], shape=["B", 1, c])
        m = self.node("repeat", [m], [self.BT(c)], n=T, **self.axattr(1, 3))
        return self.node("add", [x, m], [self.BT(c)], plus=True), c

    def b_axes(self, x, c):
        """split and slice off axis 0: channels split and concatenated back
        rotated, a token shift (slices along T, concat), the sequence split in
        halves and swapped, a channel slice into a linear"""
        r = self.r
        B, T = self.dims["B"], self.dims["T"]
        kinds = ["shift", "chslice"]
        divs = [k for k in (2, 3) if c % k == 0]
        if divs:
            kinds.append("chsplit")
        if T % 2 == 0:
            kinds.append("tsplit")
        kind = r.choice(kinds)
        if kind == "chsplit":
            k = r.choice(divs)
            parts = self.node("split", [x], [(B, T, c // k)] * k, parts=k, **self.axattr(2, 3))
            if k == 3:
                y = self.node("concat", [parts[2], parts[0]], [(B, T, 2 * c // 3)], **self.axattr(2, 3))
                y = self.node("concat", [y, parts[1]], [self.BT(c)], **self.axattr(2, 3))
            else:
                y = self.node("concat", [parts[1], parts[0]], [self.BT(c)], **self.axattr(2, 3))
            return self.node("mul", [y, x], [self.BT(c)], plus=True), c
        if kind == "tsplit":
            h = self.node("split", [x], [(B, T // 2, c)] * 2, parts=2, **self.axattr(1, 3))
            y = self.node("concat", [h[1], self.node("gelu", [h[0]], [(B, T // 2, c)])], [self.BT(c)],
                          **self.axattr(1, 3))
            return self.node("add", [x, y], [self.BT(c)], plus=True), c
        if kind == "shift" and T >= 2:
            a = self.node("slice", [x], [(B, 1, c)], start=0, len=1, **self.axattr(1, 3))
            b = self.node("slice", [x], [(B, T - 1, c)], start=0, len=T - 1, **self.axattr(1, 3))
            y = self.node("concat", [a, b], [self.BT(c)], **self.axattr(1, 3))
            w = self.param([c], std=0.5)
            return self.node("add", [x, self.node("mul", [y, w], [self.BT(c)], plus=True)], [self.BT(c)],
                             plus=True), c
        ln = r.randint(1, c)
        y = self.node("slice", [x], [self.BT(ln)], start=r.randint(0, c - ln), len=ln, **self.axattr(2, 3))
        return self.linear(y, ln, n=c if self.in_loop() else r.choice([c, 3, 4]))

    BLOCKS = [("linear", 3), ("gelu", 2), ("scale", 1), ("softmax", 1), ("layernorm", 3),
              ("residual", 5), ("mlp", 2), ("bcast", 2), ("attention", 3), ("viewmm", 2),
              ("chanperm", 1), ("tokmix", 1), ("ta", 1), ("slicemm", 1), ("heads", 1),
              ("batchsplit", 1), ("skip", 2), ("act", 2), ("rmsnorm", 1), ("sub", 1), ("swiglu", 1),
              ("rope", 1), ("gqa", 3), ("concat", 2), ("repeat", 1), ("mean", 1), ("axes", 2)]
    KEEP = {"gelu", "scale", "softmax", "layernorm", "residual", "bcast", "chanperm", "tokmix",
            "batchsplit", "skip", "act", "rmsnorm", "sub", "swiglu", "rope", "gqa", "mean"}

    def block(self, x, c, shape_keep=False):
        names = [b for b, w in self.BLOCKS for _ in range(w)]
        while True:
            b = self.r.choice(names)
            if shape_keep and b not in self.KEEP:
                continue
            return getattr(self, "b_" + b)(x, c)

    # -- whole graph
    def draw(self):
        r = self.r
        d = self.dims
        B, T, V = d["B"], d["T"], d["V"]
        loop = r.random() < 0.5
        if loop:
            d["L"] = r.choice([1, 2, 3])
        self.carry_shape = {}
        c = r.choice([2, 3, 4, 5, 6, 8, 9])
        R = V + r.choice([0, 0, 1, 3])
        wte = self.param([R, c], std=1.0, stack=False, reuse=0)
        x = self.node("embedding", [wte, "tokens"], [self.BT(c)])
        if r.random() < 0.3:
            x, c = self.b_bcast(x, c)
        npre = r.randint(0, self.size)
        for _ in range(npre):
            x, c = self.block(x, c)
        if loop:
            self.nodes["pre"].append({"op": "alias", "in": [x], "attr": {}, "out": ["x"],
                                      "shape": [list(self.BT(c))]})
            self.carry_shape["x"] = self.BT(c)
            self.sec = "loop"
            y = "x"
            for _ in range(r.randint(1, max(1, self.size // 2 + 1))):
                y, c2 = self.block(y, c)
                assert c2 == c, "a loop block changed the width"
            self.nodes["loop"].append({"op": "alias", "in": [y], "attr": {}, "out": ["x"],
                                       "shape": [list(self.BT(c))]})
            self.sec = "post"
            x = "x"
        else:
            self.sec = "post"
        for _ in range(r.randint(0, max(0, self.size - npre))):
            x, c = self.block(x, c)
        if r.random() < 0.5:
            x, c = self.b_layernorm(x, c)
        losses = [self.head(x, c, wte, R)]
        if r.random() < 0.25:    # a second loss term on another tensor
            cand = [(n, s) for n, s in self.visible() if len(s) == 3 and s[:2] == (B, T)]
            n2, s2 = r.choice(cand)
            l2 = self.head(n2, s2[2], wte, R)
            l2 = self.node("scale", [l2], [()], s=r.choice([0.5, 0.25, 2.0]))
            losses.append(l2)
        if r.random() < 0.15:    # a regularizer: s * the mean of a [B, T, k] tensor (mean of means)
            cand = [(n, s) for n, s in self.visible() if len(s) == 3 and s[:2] == (B, T)]
            n2, s2 = r.choice(cand)
            m = self.node("mean", [n2], [(B, T)])
            m = self.node("mean", [m], [(B,)])
            m = self.node("mean", [m], [()])
            losses.append(self.node("scale", [m], [()], s=r.choice([0.5, -0.3, 1.0])))
        loss = losses[0]
        for l2 in losses[1:]:
            loss = self.node("add", [loss, l2], [()], plus=True)
        hyper = dict(steps=3, beta1=0.9, beta2=r.choice([0.95, 0.999]),
                     lr=r.choice([0.05, 0.1, 0.2]), eps=r.choice([0.05, 0.1, 0.3]),
                     wd=r.choice([0.0, 0.1]))
        spec = {"seed": self.seed, "dims": d, "params": self.params, "pre": self.nodes["pre"],
                "loop": self.nodes["loop"], "post": self.nodes["post"], "loss": loss, "hyper": hyper,
                "nomicro": self.nomicro}
        return dce(spec)

    def head(self, x, c, wte, R):
        """logits [B, T, N >= V] then cross_entropy over the first V columns"""
        r = self.r
        d = self.dims
        B, T, V = d["B"], d["T"], d["V"]
        wshape = next(p["shape"] for p in self.params if p["name"] == wte)
        if wshape[1] == c and r.random() < 0.6:   # tied embedding
            logits = self.node("matmul", [x, wte], [(B, T, R)], tb=1)
            N = R
        else:
            N = V + r.choice([0, 0, 2])
            if r.random() < 0.5:
                logits = self.node("matmul", [x, self.param([N, c], stack=False)], [(B, T, N)], tb=1)
            else:
                logits = self.node("matmul", [x, self.param([c, N], stack=False)], [(B, T, N)])
        kw = {"n": V} if N != V or r.random() < 0.3 else {}
        return self.node("cross_entropy", [logits, "targets"], [()], **kw)


def generate(seed, size=None):
    return Gen(seed, size).draw()


# ------------------------------------------------------------------ spec utilities

def base(ref):
    return ref[:-3] if ref.endswith("[l]") else ref


def dce(spec):
    """drops nodes the loss does not need, then unused params; an unused loop
    (x not read after it) goes too"""
    need = {spec["loss"]}

    def sweep(nodes):
        keep = []
        for n in reversed(nodes):
            if any(o in need for o in n["out"]):
                keep.append(n)
                need.update(base(i) for i in n["in"])
        return list(reversed(keep))

    spec["post"] = sweep(spec["post"])
    if all(n["op"] == "alias" and n["in"] == ["x"] for n in spec["loop"]):
        spec["loop"] = []     # a loop that does nothing
    if spec["loop"] and "x" in need:
        # the body reads the carry it writes: sweep until no new names
        body = spec["loop"]
        while True:
            before = set(need)
            sweep(body)
            if need == before:
                break
        spec["loop"] = sweep(body)
    else:
        spec["loop"] = []
    spec["pre"] = sweep(spec["pre"])
    if not spec["loop"]:
        spec["dims"].pop("L", None)
    spec["params"] = [p for p in spec["params"] if p["name"] in need]
    if not spec["loop"] and any(p for p in spec["params"] if _stacked(spec, p)):
        raise ValueError("stacked param outside a loop")
    return spec


def _stacked(spec, p):
    return any(p["name"] + "[l]" in n["in"] for n in spec["loop"])


def ops_of(spec):
    ops = {}
    for sec in ("pre", "loop", "post"):
        for n in spec[sec]:
            if n["op"] != "alias":
                ops[n["op"]] = ops.get(n["op"], 0) + 1
            if n["op"] in ("split", "slice", "concat", "repeat"):   # by axis: "split@axis2", "@neg" if negative
                a = n["attr"].get("axis", 0)
                na = a + len(n["shape"][0]) if a < 0 else a
                if na < 0:       # a split that dropped the axis: axis 0
                    na = 0
                k = f"{n['op']}@axis{na}" + ("neg" if a < 0 else "")
                ops[k] = ops.get(k, 0) + 1
    if spec["loop"] and any("[l]" in i for n in spec["loop"] for i in n["in"]):
        ops["index"] = ops.get("index", 0) + 1
    return ops


def count_nodes(spec):
    return sum(1 for s in ("pre", "loop", "post") for n in spec[s] if n["op"] != "alias")


# ------------------------------------------------------------------ emitters

def to_graph(spec):
    d = spec["dims"]
    lines = ["# randgraph-spec: " + json.dumps(spec, separators=(",", ":")),
             f"# random graph, seed {spec['seed']} (tests/randgraph/gen.py)"]
    for k in ("B", "T", "V", "L"):
        if k in d:
            lines.append(f"dim {k} = {d[k]}")
    lines += ["input tokens: i32[B, T]", "input targets: i32[B, T]"]
    for p in spec["params"]:
        sh = ", ".join(("L" if (i == 0 and "L" in d and _stacked(spec, p)) else str(v))
                       for i, v in enumerate(p["shape"]))
        init = "ones" if p["init"][0] == "ones" else "normal(0.1)"
        lines.append(f"param {p['name']}: f32[{sh}] = {init}" + ("" if p["decay"] else " nodecay"))

    def emit(nodes, ind):
        for n in nodes:
            lines.append(ind + ", ".join(n["out"]) + " = " + OPS[n["op"]][0](n))

    emit(spec["pre"], "")
    if spec["loop"]:
        lines.append("for l in L {")
        emit(spec["loop"], "    ")
        lines.append("}")
    emit(spec["post"], "")
    h = spec["hyper"]
    lines.append(f"minimize {spec['loss']}")
    lines.append(f"optimizer adamw(lr={h['lr']}, beta1={h['beta1']}, beta2={h['beta2']}, "
                 f"eps={h['eps']}, weight_decay={h['wd']})")
    return "\n".join(lines) + "\n"


TORCH_PRELUDE = '''\
import math
import torch
import torch.nn.functional as F


def mm(a, b, ta, tb):
    # docs/grammar.md: with a 2-D b (and ta=0) a's leading dims are rows;
    # else batched over equal leading dims; ta/tb transpose the last two dims
    if tb:
        b = b.transpose(-1, -2)
    if b.dim() == 2 and not ta:
        return a @ b
    if ta:
        a = a.transpose(-1, -2)
    return a @ b


def cmask(x):
    T = x.shape[-1]
    m = torch.ones(T, T, dtype=torch.bool).triu(1)
    return x.masked_fill(m, float("-inf"))


def ce(logits, targets, n):
    # mean over rows of the cross-entropy over the first n columns (n=0: all)
    N = logits.shape[-1]
    n = n or N
    lg = logits[..., :n].reshape(-1, n)
    return F.cross_entropy(lg, targets.reshape(-1))


def splitax(x, parts, axis):
    # `parts` equal pieces along `axis` (negative: from the end); along the
    # first axis, an axis as long as `parts` is dropped
    axis = axis % x.dim()
    ys = torch.split(x, x.shape[axis] // parts, axis)
    if axis == 0 and x.shape[0] == parts:
        return [y.squeeze(0) for y in ys]
    return list(ys)


def rope(x, theta):
    # Hugging Face's rotate-half rotary embedding over the last axis (hs),
    # position t = index along the second-to-last axis, angle t * theta^(-2i/hs)
    T, hs = x.shape[-2], x.shape[-1]
    inv = 1.0 / (theta ** (torch.arange(0, hs, 2, dtype=torch.float64) / hs))
    ang = torch.outer(torch.arange(T, dtype=torch.float64), inv)
    emb = torch.cat([ang, ang], -1)
    cos, sin = emb.cos().to(x.dtype), emb.sin().to(x.dtype)
    h = hs // 2
    rot = torch.cat([-x[..., h:], x[..., :h]], -1)
    return x * cos + rot * sin
'''


def to_torch(spec, rec=False):
    """the forward as Python source: def forward(P, tokens, targets) -> loss;
    rec: every op's output passes through REC(t), softmax is SOFTMAX(x),
    layernorm LAYERNORM(x, w, b, eps), rmsnorm RMSNORM(x, w, eps) (the caller
    defines them: the bf16 bound of rg.py reads each activation
    and its gradient, its Monte Carlo arithmetic perturbs them)"""
    L = spec["dims"].get("L", 0)
    out = [TORCH_PRELUDE, "", "def forward(P, tokens, targets):",
           "    B, T = tokens.shape   # B: the rows of this run (B/K with micro-batches)"]

    def ref(i):
        if i in ("tokens", "targets"):
            return i
        if i.endswith("[l]"):
            return f"P[{i[:-3]!r}][l]"
        if re.fullmatch(r"p\d+", i):
            return f"P[{i!r}]"
        return i

    def emit(nodes, ind):
        for n in nodes:
            e = OPS[n["op"]][1](n, [ref(i) for i in n["in"]])
            if rec and n["op"] == "softmax":   # the caller's softmax (rg.py's MCA models the fused attention)
                e = f"SOFTMAX({ref(n['in'][0])})"
            if rec and n["op"] in ("layernorm", "rmsnorm"):   # the caller's norms (rg.py's MCA: their backward)
                i = [ref(x) for x in n["in"]]
                e = f"{n['op'].upper()}({', '.join(i)}, {n['attr'].get('eps', 1e-5)!r})"
            if rec and n["op"] != "alias":
                e = f"[REC(y) for y in {e}]" if n["op"] == "split" else f"REC({e})"
            if n["op"] == "split":
                out.append(f"{ind}{', '.join(n['out'])}, = {e}")
            else:
                out.append(f"{ind}{n['out'][0]} = {e}")

    emit(spec["pre"], "    ")
    if spec["loop"]:
        out.append(f"    for l in range({L}):")
        emit(spec["loop"], "        ")
    emit(spec["post"], "    ")
    out.append(f"    return {spec['loss']}")
    return "\n".join(out) + "\n"


def spec_from_graph(text):
    first = text.split("\n", 1)[0]
    if not first.startswith("# randgraph-spec: "):
        raise ValueError("not a randgraph file (first line lacks '# randgraph-spec: ')")
    return json.loads(first[len("# randgraph-spec: "):])
