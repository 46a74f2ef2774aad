"""Per-model MAPE of a GPU's default and calibrated profiles on Vidur's measured linear and
elementwise ops (data/calibration/vidur/compute/<gpu>/), as the tables in docs/validation.md.

    python benchmarks/kernel_tables.py a40      # A40 vs hardware_profiles/{A40,calibrated/A40}.yaml
    python benchmarks/kernel_tables.py a100     # A100-SXM-80GB
    python benchmarks/kernel_tables.py h100     # H100-SXM (Vidur's H100 rows: a selection, data/calibration/vidur/README.md)

Each model's rows are priced by ``llmsim.calibration.validate`` (the code ``llmsim validate``
runs: every row on its own measured shape). ``role`` says whether the calibrated profile was
fitted on that model's file or never saw it (the fit files are the calibration's ``source``).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import yaml

from llmsim.calibration.readers import read_profile
from llmsim.calibration.validate import validate
from llmsim.hardware import load_profile
from llmsim.models import get_model

ROOT = Path(__file__).resolve().parent.parent
PROFILES = {"a40": "A40", "a100": "A100-SXM-80GB", "h100": "H100-SXM"}


def fitted_files(calibrated: Path) -> set[str]:
    """The files the calibrated profile was fitted to (its calibration block), repository-relative."""
    return set(yaml.safe_load(calibrated.read_text()).get("calibration", {}).get("files", []))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("gpu", choices=sorted(PROFILES))
    args = ap.parse_args(argv)
    name = PROFILES[args.gpu]
    calibrated_path = ROOT / "hardware_profiles" / "calibrated" / f"{name}.yaml"
    default, calibrated = load_profile(name), load_profile(str(calibrated_path))
    fitted = fitted_files(calibrated_path)
    model = get_model("llama-2-7b")  # (each row is priced on its own shape; the model is not read)
    print(
        f"| model ({name}) | role | kind | rows | default MAPE | calibrated MAPE | calibrated tp1 / tp2 / tp4 / tp8 |"
    )
    print("|---|---|---|---:|---:|---:|---|")
    for csv in sorted((ROOT / "data/calibration/vidur/compute" / args.gpu).glob("*/*/mlp.csv*")):
        label = csv.parent.name
        role = "fit" if csv.relative_to(ROOT).as_posix() in fitted else "held out"
        rows = read_profile(csv)
        for kind, title in (("gemm", "linear"), ("elementwise", "elementwise")):
            part = [r for r in rows if r.kind == kind]
            if not part:
                continue
            before, after = validate(default, model, part), validate(calibrated, model, part)
            f = after.frame
            per_tp = f.groupby("tp")["ape"].mean()
            cells = " / ".join(f"{per_tp[t]:.1%}" if t in per_tp else "-" for t in (1, 2, 4, 8))
            print(
                f"| {label} | {role} | {title} | {len(part):,} | {before.overall_mape:.1%} | "
                f"{after.overall_mape:.1%} | {cells} |"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
