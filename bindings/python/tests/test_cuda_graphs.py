"""CUDA graphs and multi-GPU training with dlfuse ops (GPU machine; skipped without CUDA,
failing instead with DLFUSE_REQUIRE_CUDA=1):
  - a whole training step (forward, backward, optimizer) captured with torch.cuda.graph and
    replayed gives the eager step's results, on new data copied into the static inputs (a
    network of the ABI 1.0 ops and one of ABI 1.1's: GELU epilogue, residual, out form);
  - torch.compile(mode="reduce-overhead") (CUDA graphs under inductor) matches eager;
  - the DLRM MLP under DistributedDataParallel on every visible GPU (torchrun) passes its
    checks (examples/dlrm_ddp.py)."""
import os
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

import dlfuse  # noqa: E402
import dlfuse.torch as dft  # noqa: E402

from conftest import REQUIRE_CUDA, cuda_plugin_available  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


def _cuda_ok():
    return torch.cuda.is_available() and cuda_plugin_available()


@pytest.fixture(autouse=True)
def cuda():
    if not _cuda_ok():
        if REQUIRE_CUDA:
            pytest.fail(f"CUDA required: torch.cuda={torch.cuda.is_available()}, "
                        f"plugins={dlfuse.plugins()}")
        pytest.skip("no CUDA GPU/plugin")
    torch.backends.cuda.matmul.allow_tf32 = False


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.l1 = dft.FusedLinearReLU(32, 64)
        self.l2 = dft.FusedLinearReLU(64, 64)
        self.b = torch.nn.Parameter(torch.randn(64) * 0.1)
        self.head = torch.nn.Linear(64, 1)

    def forward(self, x):
        h = self.l1(x)
        z = dft.add_mul_activation(self.l2(h), h, self.b, 0.5, "silu")
        return self.head(z).squeeze(1)


class Net11(torch.nn.Module):
    """The same shape of network through ABI 1.1's ops: a GELU epilogue, a residual GEMM and
    an add_mul whose backward reads its out (tanh)."""

    def __init__(self):
        super().__init__()
        self.l1 = dft.FusedLinear(32, 64, "gelu_tanh")
        self.l2 = torch.nn.Linear(64, 64)
        self.b = torch.nn.Parameter(torch.randn(64) * 0.1)
        self.head = torch.nn.Linear(64, 1)

    def forward(self, x):
        h = self.l1(x)
        r = dft.matmul_add_residual(h, self.l2.weight.t(), self.l2.bias, h)
        z = dft.add_mul_activation(r, h, self.b, 0.5, "tanh")
        return self.head(z).squeeze(1)


NETS = {"abi10": Net, "abi11": Net11}


def _make(seed=0, net_cls=Net):
    torch.manual_seed(seed)
    net = net_cls().cuda()
    opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    return net, opt


def _step(net, opt, x, y):
    opt.zero_grad(set_to_none=False)
    loss = torch.nn.functional.mse_loss(net(x), y)
    loss.backward()
    opt.step()
    return loss


@pytest.mark.parametrize("net_name", sorted(NETS))
def test_training_step_captured_and_replayed(net_name):
    batches = [(torch.randn(128, 32, device="cuda"), torch.randn(128, device="cuda"))
               for _ in range(6)]
    # eager reference
    net_e, opt_e = _make(0, NETS[net_name])
    eager = [float(_step(net_e, opt_e, x, y)) for x, y in batches]

    net, opt = _make(0, NETS[net_name])
    sx = torch.zeros(128, 32, device="cuda")
    sy = torch.zeros(128, device="cuda")
    # warm-up on a side stream (as torch.cuda.graph asks): the plugins pick and cache
    # their algorithms here, outside the capture; then restore the initial state
    state = {k: v.clone() for k, v in net.state_dict().items()}
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            sx.copy_(batches[0][0])
            sy.copy_(batches[0][1])
            _step(net, opt, sx, sy)
    torch.cuda.current_stream().wait_stream(side)
    net.load_state_dict(state)
    opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    # momentum buffers exist from the first step on: make them before capture, zeroed,
    # which is what the first eager step starts from
    for p in net.parameters():
        opt.state[p]["momentum_buffer"] = torch.zeros_like(p)
    for p in net.parameters():
        p.grad = torch.zeros_like(p)

    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        static_loss = _step(net, opt, sx, sy)
    net.load_state_dict(state)          # capture ran nothing; keep the start state exact
    for p in net.parameters():
        opt.state[p]["momentum_buffer"].zero_()
    replayed = []
    for x, y in batches:
        sx.copy_(x)
        sy.copy_(y)
        g.replay()
        replayed.append(float(static_loss))
    # SGD with momentum from a zero buffer equals torch's first-step rule (buffer = grad)
    torch.testing.assert_close(torch.tensor(replayed), torch.tensor(eager), rtol=1e-4, atol=1e-5)
    for pe, pg in zip(net_e.parameters(), net.parameters()):
        torch.testing.assert_close(pg, pe, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("net_name", sorted(NETS))
def test_compile_reduce_overhead(net_name):
    net_e, _ = _make(1, NETS[net_name])
    net_c, _ = _make(1, NETS[net_name])
    f = torch.compile(net_c, mode="reduce-overhead", fullgraph=True)
    for i in range(4):
        x = torch.randn(64, 32, device="cuda", requires_grad=True)
        want = net_e(x)
        got = f(x)
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
        gw = torch.autograd.grad(want.square().sum(), [x, net_e.l1.weight, net_e.b])
        gg = torch.autograd.grad(got.square().sum(), [x, net_c.l1.weight, net_c.b])
        for a, b in zip(gg, gw):
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


def test_ddp_every_visible_gpu():
    n = torch.cuda.device_count()
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
           f"--nproc_per_node={n}", os.path.join(os.path.dirname(HERE), "examples", "dlrm_ddp.py"),
           "--device", "cuda", "--steps", "30", "--batch", str(128 * n)]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    print(r.stdout[-3000:], r.stderr[-3000:])
    assert r.returncode == 0 and "PASS" in r.stdout, (r.stdout[-3000:], r.stderr[-3000:])
