"""Regenerate the recurrent golden of tests/test_ww_crnn_golden.py (issue 31).

    .venv/bin/python benchmarks/make_golden_crnn.py

A small CRNN (Conv2d + BatchNorm2d twice, a 2-layer bidirectional LSTM with a Linear beside
it in the same block, a GRU, a Linear head), seeded and trained 80 Adam steps on seeded
synthetic sequences (well under a minute on one CPU thread). Writes tests/golden/:

* crnn.npz          - its state dict (PyTorch layout, float32, BatchNorm buffers included);
* ww_extras_crnn.json - WeightWatcher 0.7.7 on the module, per run (``default``,
  ``clip_xmax``: fix_fingers="clip_xmax", ``diagnostics``: detX=True with vectors=True; each
  after ``np.random.seed(0)``) every analyze() column per layer and get_summary(), keyed by
  our slice names, with WW's row and column order (``row_order``, ``columns``); and ``state_dict_layers``: the layers WeightWatcher analyzes when given the
  state dict instead (the same set: it skips ``nn.LSTM``/``nn.GRU`` either way).
"""

from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from make_golden import OUT, _plain

RUNS = {
    "default": {},
    "clip_xmax": {"fix_fingers": "clip_xmax"},
    "diagnostics": {"detX": True, "vectors": True},
}


def crnn():
    """The seeded, untrained CRNN."""
    import torch
    from torch import nn

    class BiLSTM(nn.Module):
        def __init__(self, n_in: int, hidden: int, n_out: int) -> None:
            super().__init__()
            self.rnn = nn.LSTM(n_in, hidden, num_layers=2, bidirectional=True, batch_first=True)
            self.linear = nn.Linear(2 * hidden, n_out)

        def forward(self, x):
            return self.linear(self.rnn(x)[0])

    class CRNN(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.cnn = nn.Sequential(
                nn.Conv2d(1, 16, 3, padding=1),  # 9 eigenvalues: just above min_evals=8
                nn.BatchNorm2d(16),
                nn.ReLU(),
                nn.MaxPool2d(2),
                nn.Conv2d(16, 32, 3, padding=1),
                nn.BatchNorm2d(32),
                nn.ReLU(),
                nn.MaxPool2d((2, 1)),
            )
            self.rnn = nn.Sequential(BiLSTM(128, 64, 64))
            self.gru = nn.GRU(64, 48, batch_first=True)
            self.fc = nn.Linear(48, 11)

        def forward(self, x):
            f = self.cnn(x)  # (B, 32, 4, T)
            f = f.flatten(1, 2).transpose(1, 2)  # (B, T, 128)
            return self.fc(self.gru(self.rnn(f))[0])  # (B, T, 11)

    torch.manual_seed(0)
    return CRNN()


def train_crnn():
    """80 Adam steps on seeded synthetic images (1 x 16 x 32) whose per-column label is a
    function of the column, so the weights move away from their initialization."""
    import torch

    torch.set_num_threads(1)
    net = crnn()
    g = torch.Generator().manual_seed(1)
    x = torch.randn(128, 1, 16, 32, generator=g)
    y = (x[:, 0, :4].mean(1) * 4).round().clamp(-5, 5).long() + 5  # (B, 32) in 0..10
    y = y[:, ::2]  # T = 16 after the first pooling
    opt = torch.optim.Adam(net.parameters(), lr=3e-3)
    for _ in range(80):
        opt.zero_grad()
        out = net(x)
        loss = torch.nn.functional.cross_entropy(out.reshape(-1, 11), y.reshape(-1))
        loss.backward()
        opt.step()
    net.eval()
    return net


def ww_runs(net, name_of):
    import weightwatcher as ww

    out = {}
    for run, kwargs in RUNS.items():
        np.random.seed(0)
        watcher = ww.WeightWatcher(model=net)
        details = watcher.analyze(**kwargs)
        rows = {
            name_of(r["longname"]): {c: _plain(r[c]) for c in details.columns}
            for _, r in details.iterrows()
        }
        summary = {k: _plain(v) for k, v in watcher.get_summary(details).items()}
        out[run] = {
            "kwargs": kwargs,
            "rows": rows,
            "row_order": list(rows),  # WW's row order (the JSON keys are sorted)
            "columns": [str(c) for c in details.columns],  # WW's column order
            "summary": summary,
        }
    return out


def main() -> None:
    import torch
    import weightwatcher as ww

    warnings.simplefilter("ignore")
    net = train_crnn()
    sd = {k: v.detach().numpy() for k, v in net.state_dict().items()}
    sd = {k: v.astype(np.float32) if v.dtype.kind == "f" else v for k, v in sd.items()}
    np.savez(OUT / "crnn.npz", **sd)
    # the saved weights (float32) are what WeightWatcher sees
    net.load_state_dict({k: torch.from_numpy(v) for k, v in sd.items()})
    out = ww_runs(net, lambda ln: f"{ln}.weight")
    np.random.seed(0)
    state = {k: torch.from_numpy(v) for k, v in sd.items()}
    details = ww.WeightWatcher(model=state).analyze()
    out["state_dict_layers"] = sorted(f"{ln}.weight" for ln in details["longname"])
    assert out["state_dict_layers"] == sorted(out["default"]["rows"]), "WW skip sets differ"
    path = OUT / "ww_extras_crnn.json"
    path.write_text(json.dumps(out, indent=1, sort_keys=True, allow_nan=True))
    print(f"wrote {OUT / 'crnn.npz'} and {path}", file=sys.stderr)


if __name__ == "__main__":
    main()
