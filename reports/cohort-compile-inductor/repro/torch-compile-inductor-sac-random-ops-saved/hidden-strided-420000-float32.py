# replayverify cohort reproducer: torch.compile inductor, SAC, random ops saved on hidden-strided/420000/float32 (torch 2.13.0+cpu)
import torch
from torch.utils.checkpoint import checkpoint, create_selective_checkpoint_contexts as sac, CheckpointPolicy as P
import torch._functorch.config, torch._inductor.config
CTX = lambda: sac(lambda ctx, op, *x, **k: P.MUST_SAVE if op in (torch.ops.aten.randn.default, torch.ops.aten.rand.default) else P.PREFER_RECOMPUTE)
DT, SEED, N_OPS, EPS = torch.float32, 420000, 6, 2.0 ** -23; V, C = (lambda b, shape, strides, off: b.as_strided(shape, strides, off)), (lambda v: torch.tensor(v, dtype=DT))  # a view; a coefficient (0-d)
def run(ckpt, wrap):
    torch.manual_seed(SEED)
    b_inp, b_out, b_tail, b_act, b_hid = (torch.zeros(n, dtype=DT) for n in (32, 32, 32, 32, 32))
    leaves = [V(b_inp, (1,), (1,), 0).detach().clone().requires_grad_()]; V(b_inp, (1,), (1,), 0).copy_(leaves[0])
    def fwd(b_inp, b_out, b_tail, b_act, b_hid):
        def seg(b_act, b_inp, b_out):
            b_act, b_out = b_act.clone(), b_out.clone()
            V(b_act, (1,), (1,), 0).copy_((V(b_inp, (1,), (1,), 0) * (torch.rand(1, dtype=DT) < C(0.25)).to(DT)) / C(0.25))
            V(b_act, (1,), (1,), 4).copy_((C(-1.149) * V(b_act, (1,), (1,), 0) + C(1.36) * V(b_hid, (1,), (2,), 0)) + C(1.054))
            V(b_hid, (1,), (2,), 1).copy_((C(-1.006) * V(b_hid, (1,), (2,), 1) + C(1.244) * V(b_hid, (1,), (2,), 0)) + C(0.0))
            V(b_out, (1,), (1,), 0).copy_(V(b_act, (1,), (1,), 4) * V(b_act, (1,), (1,), 0))
            return b_act, b_out,
        b_act, b_out, = ckpt(seg, b_act, b_inp, b_out)
        return b_inp, b_out, b_tail, b_act, b_hid,
    b_inp, b_out, b_tail, b_act, b_hid, = wrap(fwd)(b_inp, b_out, b_tail, b_act, b_hid)
    V(b_hid, (1,), (2,), 0).copy_((C(-0.794) * V(b_hid, (1,), (2,), 0) + C(-0.677) * V(b_hid, (1,), (2,), 1)) + C(-0.759))
    V(b_tail, (1,), (1,), 0).copy_(V(b_out, (1,), (1,), 0) + C(0.131) * torch.randn(1, dtype=DT))
    w = torch.tensor([1.0], dtype=torch.float64)
    (w * V(b_tail, (1,), (1,), 0).reshape(-1).to(torch.float64)).sum().backward()
    return torch.cat([torch.zeros(t.numel()) if t.grad is None else t.grad.reshape(-1) for t in leaves] + [torch.zeros(0)]).double(), {'inp': b_inp, 'out': b_out, 'tail': b_tail, 'act': b_act, 'hid': b_hid}, torch.get_rng_state()
plain = run(lambda f, *a: f(*a), lambda f: f)
try:
    with torch._functorch.config.patch(activation_memory_budget=1.0), torch._inductor.config.patch(fallback_random=True):
        got = run(lambda f, *a: checkpoint(f, *a, use_reentrant=False, preserve_rng_state=True, context_fn=CTX), lambda f: torch.compile(f, backend='inductor', fullgraph=True))
except Exception as e:  # the method refused it (a compiler error: what it wraps)
    e = getattr(e, 'inner_exception', None) or e; print(f'DIFFERS: raised {type(e).__name__}: ' + (str(e).strip().splitlines() or [''])[0]); raise SystemExit(1)
err = max((got[0] - plain[0]).abs().tolist(), default=0.0)
out = [f'gradient max|diff| {err:.3g}'] * (not err <= 64 * EPS * N_OPS * max([1.0, *plain[0].abs().tolist()]))
out += [f'buffer {k}' for k, t in plain[1].items() if t.detach().numpy().tobytes() != got[1][k].detach().numpy().tobytes()]
out += ['generator state'] * (not torch.equal(plain[2], got[2]))
print('\n'.join('DIFFERS: ' + x for x in out) or 'no difference'); raise SystemExit(1 if out else 0)
