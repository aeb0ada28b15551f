"""Model latency by batch size through the CUDA execution provider with IO binding.

    .venv/bin/python -m bench.gpu [--model models/fraud/1/model.onnx] [--out bench-out]

On a machine with a usable GPU it binds inputs and outputs to device memory
(IO binding) so each run measures the model, not host-side copies, and reports
median and p99 latency and rows/s per batch size, beside plain `session.run`.
Without a GPU it runs the same on the CPU execution provider and says so, so the
script itself stays tested everywhere. NOTE: ONNX Runtime places operators the
CUDA provider lacks (the demo model's TreeEnsemble) on the CPU; a GPU pays off for
dense models (MLPs, transformers), which the same script measures unchanged.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort

from shared.models.onnx import OnnxModel, choose_providers
from shared.settings import OrtOptions

BATCHES = (1, 2, 4, 8, 16, 32, 64, 128, 256)


def _time(fn: object, repeat: int) -> list[float]:
    samples = []
    for _ in range(repeat):
        started = time.perf_counter()
        fn()  # type: ignore[operator]
        samples.append(time.perf_counter() - started)
    return samples


def measure(model_path: Path, repeat: int = 300) -> dict[str, object]:
    options = OrtOptions(use_gpu=True)
    providers = choose_providers(options)
    on_gpu = "CUDAExecutionProvider" in providers
    spec = OnnxModel.load(model_path.read_bytes(), OrtOptions(use_gpu=False)).spec
    session = ort.InferenceSession(str(model_path), providers=providers)
    device = "cuda" if on_gpu else "cpu"
    rows = []
    for batch in BATCHES:
        x = np.random.default_rng(batch).random((batch, spec.width), dtype=np.float32)
        binding = session.io_binding()
        binding.bind_ortvalue_input(spec.input_name, ort.OrtValue.ortvalue_from_numpy(x, device, 0))
        binding.bind_output(spec.score_output, device)

        def bound(binding: ort.IOBinding = binding) -> None:
            session.run_with_iobinding(binding)
            binding.copy_outputs_to_cpu()  # NOTE: the answer has to reach the host to be served

        def plain(x: np.ndarray = x) -> None:
            session.run([spec.score_output], {spec.input_name: x})

        for fn in (bound, plain):
            _time(fn, 30)  # warm-up (CUDA graphs, allocator arenas)
        b, p = _time(bound, repeat), _time(plain, repeat)
        rows.append(
            {
                "batch": batch,
                "iobinding_median_us": statistics.median(b) * 1e6,
                "iobinding_p99_us": sorted(b)[int(0.99 * len(b))] * 1e6,
                "plain_median_us": statistics.median(p) * 1e6,
                "rows_per_s": batch / statistics.median(b),
            }
        )
    return {
        "device": device,
        "providers": session.get_providers(),
        "gpu": on_gpu,
        "model": str(model_path),
        "rows": rows,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, default=Path("models/fraud/1/model.onnx"))
    parser.add_argument("--out", type=Path, default=Path("bench-out"))
    parser.add_argument("--repeat", type=int, default=300)
    args = parser.parse_args()
    result = measure(args.model, args.repeat)
    if not result["gpu"]:
        print(
            "no usable GPU here: measuring on the CPU execution provider (the same code path, IO binding to host memory)"
        )
    lines = [
        f"# Model latency by batch size on {result['device']} ({', '.join(result['providers'])})",  # type: ignore[arg-type]
        "",
        "| batch | IO binding median µs | IO binding p99 µs | plain run median µs | rows/s |",
        "|---:|---:|---:|---:|---:|",
    ]
    for row in result["rows"]:  # type: ignore[attr-defined]
        lines.append(
            f"| {row['batch']} | {row['iobinding_median_us']:.1f} | {row['iobinding_p99_us']:.1f} | "
            f"{row['plain_median_us']:.1f} | {row['rows_per_s']:,.0f} |"
        )
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"gpu-{result['device']}.json").write_text(json.dumps(result, indent=2))
    (args.out / f"gpu-{result['device']}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
