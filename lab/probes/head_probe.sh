# The CPU head at prefill with only the last position moved off the GPU: two plans of the w3072 held-out shape
# validated twice each against a stored calibration (run on the H200: bash lab/probes/head_probe.sh)
python3 -m pip install -q --no-index --no-deps --target .site .whl/*.whl 2>/dev/null; export PYTHONPATH=$PWD/.site:$PWD
W=/tmp/hp; mkdir -p $W/tr
python3 -m offloadsim make-checkpoint --preset llama-3.1-8b --layers 10 --hidden 3072 --intermediate 8192 --heads 24 --kv-heads 8 --vocab 32768 --device cuda --out $W/ckpt >/dev/null 2>&1
P=lab/data/heldout/heldout-w3072-b.profile.json
for c in "v60 --vram 1.350GiB --batch 8 --prompt-tokens 512" "v45 --vram 1.013GiB --pinned 0.5GiB --batch 32 --prompt-tokens 256"; do set -- $c; L=$1; shift
 python3 -m offloadsim plan $W/ckpt --machine $P "$@" --new-tokens 8 --out $W/$L.plan.json --json >/dev/null
 for r in 0 1; do python3 -m offloadsim validate --checkpoint $W/ckpt --plan $W/$L.plan.json --profile $P "$@" --new-tokens 8 --json --out $W/tr/$L-$r > $W/$L-$r.json 2>$W/$L-$r.err; tail -c 300 $W/$L-$r.err; done; done
tar czf $OUT/probe.tgz -C $W tr v60-0.json v60-1.json v45-0.json v45-1.json
