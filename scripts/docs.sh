#!/usr/bin/env bash
# Build the documentation site (mkdocs-material, mkdocs.yml) with warnings as errors, as .ci/run does. The reference
# pages (configuration, CLI, HTTP API) are generated from the code during the build by the hook
# scripts/docs/gen_reference.py: nothing needs generating beforehand, and nothing is written into docs/.
# The site goes to $TMPDIR/smartsensor-site (or the folder given as the first argument).
set -euo pipefail
export NO_MKDOCS_2_WARNING=1  # mkdocs-material 9.7+ prints a notice about MkDocs 2 on every build
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$HERE/env.sh"

ensure_venv  # mkdocs-material comes with the test extra
cd "$ROOT"
site="${1:-${TMPDIR:-/tmp}/smartsensor-site}"
case "$site" in -*) echo "usage: $0 [SITE_DIR]  (always --strict; no options)" >&2; exit 2 ;; esac
log "mkdocs build --strict into $site"
python -m mkdocs build --strict --site-dir "$site"  # not --quiet: it hides the warnings strict counts
log "site built: $site/index.html"
