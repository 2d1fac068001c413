"""Where the repository's own files are, for tests that read shipped manifests,
matrices and profiles (one place, so moving a test never breaks a path)."""

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
MANIFESTS = REPO_ROOT / "manifests"
PROFILES = REPO_ROOT / "harness" / "spillover_harness" / "profile" / "shipped"
