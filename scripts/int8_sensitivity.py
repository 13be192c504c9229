"""Which layers of all-MiniLM-L6-v2 can run int8 at worst cosine >= 0.999 (issue 12).

A PyTorch fake-quant simulation of the native int8 path: activations per token
(symmetric, 127 levels), weights per output channel (symmetric), kept layers in
bf16 (inputs and weights rounded). Over the 512 skills bench_precision.py uses
(sample skills 1000..1511, 256 tokens) and the 24 queries, against f32. It
reproduces the native plan's worst cosine (0.99938 here, 0.99943 measured) and
tries to bring the query/key/value product (input: LayerNorm outliers) or the
feed-forward output (input: post-GELU, heavy-tailed) into int8:
  - smoothing of the query/key/value input (x / s, W * s), s from LayerNorm's
    weight and bias (data-free) or from activation maxima on 128 other skills;
  - splitting the top-k outlier input channels off into an f32 product.

    python3 scripts/int8_sensitivity.py   # ~10 min on 2 cores

Measured (2026-12-02): current plan 0.999378; query/key/value int8 0.997240,
smoothed 0.9970-0.9975 (data-free) / 0.99836-0.99895 (calibrated), split
0.9974-0.9978 (data-free) / 0.99921-0.99925 (calibrated top 4-16);
feed-forward output int8 with a calibrated or weight-column split of 8-32
channels 0.99879-0.99896.
"""
import json, sys, itertools
import numpy as np, torch
sys.path.insert(0, str(__import__('pathlib').Path(__file__).resolve().parent))
from bench_precision import skill_text
from transformers import AutoModel, AutoTokenizer
torch.set_num_threads(2)
ROOT = __import__('pathlib').Path(__file__).resolve().parent.parent
M = str(ROOT / 'models/all-MiniLM-L6-v2')
SAMPLE = ROOT.parent / 'shared/skillret-sample'
tok = AutoTokenizer.from_pretrained(M)
model = AutoModel.from_pretrained(M).eval()
skills = [json.loads(l) for l in open(SAMPLE / 'skills/test.jsonl') if l.strip()]
docs = [skill_text(s) for s in skills[1000:1512]]
queries = [json.loads(l)['query'] for l in open(SAMPLE / 'queries/test.jsonl') if l.strip()]
calib = [skill_text(s) for s in skills[:128]]

def qa(x):  # per token symmetric int8
    m = x.abs().amax(-1, keepdim=True).clamp_min(1e-30)
    return torch.round(x * (127 / m)).clamp(-127, 127) * (m / 127)
def qw(w):  # per output channel
    m = w.abs().amax(1, keepdim=True).clamp_min(1e-30)
    return torch.round(w * (127 / m)).clamp(-127, 127) * (m / 127)
def bf(x):
    return x.to(torch.bfloat16).to(torch.float32)

orig = {}
for name, mod in model.named_modules():
    if isinstance(mod, torch.nn.Linear):
        orig[name] = mod.weight.detach().clone()

def role(name):
    if 'attention.self' in name: return 'qkv'
    if 'attention.output' in name: return 'ao'
    if 'intermediate' in name: return 'fi'
    return 'fo'

def setup(plan, smooth=None, split=None):
    for name, mod in model.named_modules():
        if not isinstance(mod, torch.nn.Linear) or not name.startswith("encoder."): continue
        r = role(name); mode = plan[r]
        w = orig[name]
        layer = int(name.split('.')[2])
        s = smooth[layer] if (smooth is not None and r == 'qkv') else None
        o = split.get((r, layer)) if split is not None else None
        if mode == 'f32':
            mod.weight.data = w.clone(); mod.forward = torch.nn.Linear.forward.__get__(mod); continue
        if mode == 'bf16':
            mod.weight.data = bf(w)
            def f(x, mod=mod): return torch.nn.functional.linear(bf(x), mod.weight, mod.bias)
        elif o is not None:
            keep = torch.ones(w.shape[1], dtype=torch.bool); keep[o] = False
            wq = w.clone(); wq[:, ~keep] = 0; wq = qw(wq)
            wo = w[:, ~keep].clone()
            mod.weight.data = wq
            def f(x, mod=mod, keep=keep, wo=wo):
                xi = x * keep
                return torch.nn.functional.linear(qa(xi), mod.weight, mod.bias) + x[..., ~keep] @ wo.T
            mod.forward = f; continue
        else:
            ws = w * s[None, :] if s is not None else w
            mod.weight.data = qw(ws)
            def f(x, mod=mod, s=s):
                if s is not None: x = x / s
                return torch.nn.functional.linear(qa(x), mod.weight, mod.bias)
        mod.forward = f

def embed(texts):
    out = []
    with torch.no_grad():
        for i in range(0, len(texts), 32):
            e = tok(texts[i:i+32], padding=True, truncation=True, max_length=256, return_tensors='pt')
            h = model(**e).last_hidden_state
            m = e['attention_mask'][..., None].float()
            v = (h * m).sum(1) / m.sum(1)
            out.append(torch.nn.functional.normalize(v, dim=-1))
    return torch.cat(out)

setup({'qkv': 'f32', 'ao': 'f32', 'fi': 'f32', 'fo': 'f32'})
ref_d, ref_q = embed(docs), embed(queries)
# activation maxima of the qkv input per layer, on calibration texts (disjoint from the eval skills)
amax = {}
hooks = []
for name, mod in model.named_modules():
    if name.endswith('attention.self.query'):
        layer = int(name.split('.')[2])
        def hk(m, inp, out, layer=layer):
            a = inp[0].abs().reshape(-1, inp[0].shape[-1]).amax(0)
            amax[layer] = torch.maximum(amax.get(layer, a), a)
        hooks.append(mod.register_forward_hook(hk))
embed(calib)
for h in hooks: h.remove()
# LN params feeding each layer's qkv
ln = {0: model.embeddings.LayerNorm}
for l in range(1, 6): ln[l] = model.encoder.layer[l - 1].output.LayerNorm
def wmax(l):
    ws = [orig[f'encoder.layer.{l}.attention.self.{k}'] for k in ('query', 'key', 'value')]
    return torch.cat(ws).abs().amax(0)

def score(tag, plan, smooth=None, split=None):
    setup(plan, smooth, split)
    d, q = embed(docs), embed(queries)
    cd = (d * ref_d).sum(-1); cq = (q * ref_q).sum(-1)
    print(f'{tag:50s} worst {min(cd.min(), cq.min()).item():.6f}  mean {cd.mean().item():.6f}', flush=True)

# activation maxima of fo inputs
famax = {}
hooks = []
for name, mod in model.named_modules():
    if name.endswith('.output.dense') and 'attention' not in name:
        layer = int(name.split('.')[2])
        def hk(m, inp, out, layer=layer):
            a = inp[0].abs().reshape(-1, inp[0].shape[-1]).amax(0)
            famax[layer] = torch.maximum(famax.get(layer, a), a)
        hooks.append(mod.register_forward_hook(hk))
setup({'qkv': 'f32', 'ao': 'f32', 'fi': 'f32', 'fo': 'f32'})
embed(calib)
for h in hooks: h.remove()
base = {'qkv': 'bf16', 'ao': 'int8', 'fi': 'int8', 'fo': 'bf16'}
score('current (qkv, fo bf16)', base)
p = dict(base, qkv='int8')
score('qkv int8, no smoothing', p)
for a in [0.25, 0.5, 0.75, 1.0]:
    sm = {l: (ln[l].weight.detach().abs() + ln[l].bias.detach().abs()).clamp_min(1e-5) ** a / wmax(l) ** (1 - a) for l in range(6)}
    score(f'qkv int8, LN-proxy smoothing a={a}', p, sm)
for a in [0.25, 0.5, 0.75]:
    sm = {l: amax[l].clamp_min(1e-5) ** a / wmax(l).clamp_min(1e-5) ** (1 - a) for l in range(6)}
    score(f'qkv int8, calibrated smoothing a={a}', p, sm)
for k in [4, 8, 16]:
    lnp = {('qkv', l): torch.topk(ln[l].weight.detach().abs() + ln[l].bias.detach().abs(), k).indices for l in range(6)}
    score(f'qkv split LN-proxy top{k} (fo bf16)', dict(base, qkv='int8'), split=lnp)
    cal = {('qkv', l): torch.topk(amax[l], k).indices for l in range(6)}
    score(f'qkv split calibrated top{k} (fo bf16)', dict(base, qkv='int8'), split=cal)
for k in [8, 32]:
    cal = {('fo', l): torch.topk(famax[l], k).indices for l in range(6)}
    score(f'fo split calibrated top{k} (qkv bf16)', dict(base, fo='int8'), split=cal)
    wc = {('fo', l): torch.topk(orig[f'encoder.layer.{l}.output.dense'].abs().amax(0), k).indices for l in range(6)}
    score(f'fo split weight-col top{k} (qkv bf16)', dict(base, fo='int8'), split=wc)
