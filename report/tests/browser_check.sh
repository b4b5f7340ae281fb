#!/usr/bin/env bash
# The HTML reports in a real browser (ctest: report_browser). For reports of a plan, a prediction, a validation,
# a calibration profile and a simulation, headless Chromium must
#   - render the page to a PNG with no console message at all (the pages have no scripts, so any message is an
#     error: a parse problem, a blocked or failed load);
#   - lay out every expected <svg> chart with a real size (measured with getBoundingClientRect in an instrumented
#     copy of the page: the report itself stays script-free);
# and the files themselves must be self-contained: no <script>, no external src/href, no @import or url().
#
# Usage: browser_check.sh SHARDPLAN_BINARY WORK_DIR
# Exit 77 (ctest SKIP_RETURN_CODE) when no Chromium is installed (Debian: apt-get install chromium).
# The PNGs stay in WORK_DIR for people to look at.
set -euo pipefail

bin=$1
work=$2
here=$(cd "$(dirname "$0")" && pwd)
browser=""
for b in chromium chromium-browser google-chrome-stable google-chrome; do
  if command -v "$b" >/dev/null 2>&1; then browser=$b; break; fi
done
if [ -z "$browser" ]; then
  echo "SKIP: no Chromium found (Debian package: chromium)"
  exit 77
fi

rm -rf "$work"
mkdir -p "$work"
cd "$work"
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

chrome() {  # chrome LOG ARGS...: one headless run with its own profile, console messages to LOG
  local log=$1; shift
  timeout 120 "$browser" --headless --disable-gpu --no-sandbox --no-first-run --no-default-browser-check \
    --user-data-dir="$work/profile" --hide-scrollbars --force-device-scale-factor=1 \
    --enable-logging=stderr --v=0 "$@" 2>"$log"
}

# The documents: the seed's plan and prediction, a validation in CONTRACT.md's shape, a real CPU calibration
# profile (report/tests/cpu-profile.yaml), and the seed's simulated step.
"$bin" plan --preset 8b --gpus 8 --report plan.html >/dev/null
"$bin" predict --preset 8b --gpus 8 --format json >predict.json
"$bin" report predict.json -o predict.html
cat >validate.json <<'EOF'
{"config": {"model": "8b", "cluster": "a800x8", "gpu": "a800-80g", "gpus": 8, "tp": 1, "pp": 1, "dp": 8, "zero": 3,
            "micro_batch": 1, "recompute": "none", "precision": "pure-bf16", "framework": "fsdp"},
 "predicted": {"peak_bytes": 30400000000, "step_s": 1.92},
 "measured": {"peak_bytes": 31850000000, "step_s": 2.05},
 "error_pct": {"peak_bytes": -4.55, "step_s": -6.34},
 "components": {"params": {"predicted": 2080000000, "measured": 2080000000},
                "activations": {"predicted": 10800000000, "measured": 11900000000},
                "buffers": {"predicted": 2700000000, "measured": 2400000000},
                "compute_s": {"predicted": 1.71, "measured": 1.80}}}
EOF
"$bin" report validate.json -o validate.html
"$bin" report "$here/cpu-profile.yaml" -o calibration.html
"$bin" simulate --preset 8b --gpus 8 --format json >simulate.json
"$bin" report simulate.json -o simulate.html

check() {  # check PAGE "chart ids..."
  local page=$1 ids=$2 name=${1%.html}
  # Self-contained: nothing to fetch, nothing to run.
  grep -qi '<script' "$page" && fail "$page has a <script>"
  if grep -Eo '(src|href)="[^"]*"' "$page" | grep -v '^href="data:' | grep -q .; then
    fail "$page refers to another resource: $(grep -Eo '(src|href)="[^"]*"' "$page" | grep -v '^href="data:' | head -1)"
  fi
  if grep -Eo 'https?://[^" )]*' "$page" | grep -v '^http://www.w3.org/2000/svg$' | grep -q .; then
    fail "$page has a URL: $(grep -Eo 'https?://[^" )]*' "$page" | grep -v '^http://www.w3.org/2000/svg$' | head -1)"
  fi
  grep -Eq '@import|url\(' "$page" && fail "$page imports a stylesheet or loads a url()"

  # Layout: an instrumented copy reports each chart's rendered size and the page height.
  sed 's#</body>#<script>const o=[];for(const s of document.querySelectorAll("svg")){const r=s.getBoundingClientRect();o.push("SVG "+(s.id||"-")+" "+Math.round(r.width)+" "+Math.round(r.height)+" "+s.querySelectorAll("rect,path,circle,line").length);}const p=document.createElement("pre");p.textContent="\\n"+o.join("\\n")+"\\nPAGE "+document.documentElement.scrollHeight+"\\n";document.body.appendChild(p);</script></body>#' \
    "$page" >"$name.measure.html"
  chrome "$name.measure.log" --window-size=1100,900 --dump-dom "file://$work/$name.measure.html" >"$name.dom"
  local height
  height=$(awk '$1 == "PAGE" {print $2}' "$name.dom")
  [ -n "$height" ] || { fail "$page: no layout came back from Chromium"; return; }
  for id in $ids; do
    local line
    line=$(awk -v id="$id" '$1 == "SVG" && $2 == id' "$name.dom")
    if [ -z "$line" ]; then fail "$page: no <svg id=\"$id\"> in the rendered DOM"; continue; fi
    read -r _ _ w h marks <<<"$line"
    if [ "$w" -lt 300 ] || [ "$h" -lt 60 ] || [ "$marks" -lt 3 ]; then
      fail "$page: chart $id is ${w}×${h} px with $marks marks (want ≥ 300×60 and ≥ 3)"
    else
      echo "ok: $page chart $id ${w}×${h} px, $marks marks"
    fi
  done

  # The real page to a PNG, full height; not one console message.
  [ "$height" -gt 16000 ] && height=16000
  chrome "$name.log" --window-size=1100,"$height" --screenshot="$work/$name.png" "file://$work/$page" >/dev/null
  local quiet=1
  if grep -E ':CONSOLE|Uncaught' "$name.log"; then fail "$page: console messages (above)"; quiet=0; fi
  if [ ! -s "$name.png" ] || [ "$(head -c 8 "$name.png" | od -An -tx1 | tr -d ' \n')" != "89504e470d0a1a0a" ]; then
    fail "$page: no PNG was written"
  elif [ "$(stat -c %s "$name.png")" -lt 20000 ]; then
    fail "$page: the PNG is suspiciously small ($(stat -c %s "$name.png") bytes)"
  elif [ "$quiet" -eq 1 ]; then
    echo "ok: $page rendered to $work/$name.png (1100×$height, no console messages)"
  fi
}

check plan.html "memory step-time step-overhead"
check predict.html "memory step-time"
check validate.html "validation-memory validation-time"
check calibration.html "busbw gemm"
check simulate.html "memory step-time"

if [ "$failures" -ne 0 ]; then
  echo "$failures check(s) failed"
  exit 1
fi
echo "all browser checks passed"
