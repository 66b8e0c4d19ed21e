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
    "split": (lambda n: f"split({n['in'][0]}, {n['attr']['parts']})",
              lambda n, i: f"split0({i[0]}, {n['attr']['parts']})"),
    "slice": (lambda n: f"slice({n['in'][0]}, {n['attr']['start']}, {n['attr']['len']})",
              lambda n, i: f"{i[0]}[{n['attr']['start']}:{n['attr']['start'] + n['attr']['len']}]"),
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
        kind = r.choice(["lin", "mlp", "attn", "any", "other"])
        if kind == "lin":
            y, _ = self.linear(x, c, n=c)
        elif kind == "mlp":
            y, _ = self.b_mlp(x, c)
        elif kind == "attn":
            y, _ = self.b_attention(x, c)
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
        qkv = self.node("reshape", [qkv], [(B, T, 3, nh, hs)], shape=["B", T, 3, nh, hs])
        qkv = self.node("permute", [qkv], [(3, B, nh, T, hs)], perm=[2, 0, 3, 1, 4])
        q, k, v = self.node("split", [qkv], [(B, nh, T, hs)] * 3, parts=3)
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
        parts = self.node("split", [x], [(T, c)] * B, parts="B")
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

    BLOCKS = [("linear", 3), ("gelu", 2), ("scale", 1), ("softmax", 1), ("layernorm", 3),
              ("residual", 5), ("mlp", 2), ("bcast", 2), ("attention", 3), ("viewmm", 2),
              ("chanperm", 1), ("tokmix", 1), ("ta", 1), ("slicemm", 1), ("heads", 1),
              ("batchsplit", 1), ("skip", 2), ("act", 2), ("rmsnorm", 1), ("sub", 1), ("swiglu", 1)]
    KEEP = {"gelu", "scale", "softmax", "layernorm", "residual", "bcast", "chanperm", "tokmix",
            "batchsplit", "skip", "act", "rmsnorm", "sub", "swiglu"}

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
        loss = losses[0]
        if len(losses) > 1:
            loss = self.node("add", [losses[0], losses[1]], [()], plus=True)
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


def split0(x, parts):
    ys = torch.split(x, x.shape[0] // parts, 0)
    return [y.squeeze(0) for y in ys] if x.shape[0] == parts else list(ys)
'''


def to_torch(spec):
    """the forward as Python source: def forward(P, tokens, targets) -> loss"""
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
