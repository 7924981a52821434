#!/usr/bin/env bash
# The cells of this directory's results.jsonl, each build's keel-peer in
# turn (NAME=PATH ...), ikcp from the first, REPS rounds (default 1; the
# counts move by a few per cent from run to run, as acknowledgements and
# batches fall differently):
#   REPS=3 matrix.sh OUT.jsonl main=/tmp/kp-main new=bench-peers/target/release/keel-peer
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
out=$1; shift
cells=("client 8 60 400" "server 20 60 100" "server 1000 2 100 --LL=524288,8,64")
first=${1#*=}
for rep in $(seq "${REP_FROM:-1}" "${REPS:-1}"); do
for spec in "$@" "ikcp=$first"; do
  name=${spec%%=*} kp=${spec#*=}
  lib=keel; [[ $name == ikcp ]] && lib=ikcp
  for cell in "${cells[@]}"; do
    read -r role clients rate payload opts <<<"$cell"
    line=$(KEEL_PEER=$kp "$here/run.sh" "$role" "$lib" "$clients" "$rate" "$payload" ${opts:-})
    echo "$line" | python3 -c "import json,sys;r=json.load(sys.stdin);r['build']='$name';r['rep']=$rep;print(json.dumps(r))" | tee -a "$out"
  done
done
done
