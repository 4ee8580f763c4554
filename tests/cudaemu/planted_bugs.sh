#!/usr/bin/env bash
# planted_bugs.sh — proves the CUDA emulator can fail (make test-cuda-emu runs it).
#
# Copies the repository and its build-emu/ into a scratch directory, then for each bug:
# restores the pristine sources, plants the bug with one sed edit in a copy of a .cu
# file, rebuilds (only that object and the test relink), runs the CUDA suite's tests that
# exercise the code, and requires them to FAIL with the expected evidence in their
# output. Prints one line per bug; exit status 1 if any bug went unnoticed (or could
# not be planted: the sed pattern no longer matches the source).
set -u
cd "$(dirname "$0")/../.."
root=$PWD
[ -x build-emu/tests/test_ops_cuda ] || { echo "planted_bugs: build-emu/ missing (run make test-cuda-emu)"; exit 2; }
scratch=$(mktemp -d "${TMPDIR:-/tmp}/scanprop-bugs.XXXXXX")
trap 'rm -rf "$scratch"' EXIT
git ls-files -z | xargs -0 cp -a --parents -t "$scratch" 2>/dev/null
cp -a build-emu "$scratch/"
cd "$scratch"
missed=0

# plant NAME FILE SED-EXPR ENV FILTER EVIDENCE-REGEX [SUITE (default test_ops_cuda)]
plant() {
  local name=$1 file=$2 expr=$3 envs=$4 filter=$5 evidence=$6 suite=${7:-test_ops_cuda}
  cp "$root/$file" "$file.orig"
  sed -e "$expr" "$file.orig" > "$file"
  if cmp -s "$file" "$file.orig"; then
    echo "NOT PLANTED  $name: '$expr' does not match $file"; missed=$((missed+1)); mv "$file.orig" "$file"; return
  fi
  rm "$file.orig"
  if ! make -s CUDA=1 CUDA_EMU=1 BUILD=build-emu build-emu/tests/$suite >build.log 2>&1; then
    echo "NOT BUILT    $name (see build.log)"; sed -n 1,20p build.log; missed=$((missed+1)); cp "$root/$file" "$file"; return
  fi
  out=$(env BUILD=build-emu $envs timeout 300 build-emu/tests/$suite --jobs=1 --filter "$filter" 2>&1)
  rc=$?
  if [ $rc -ne 0 ] && grep -Eq "$evidence" <<<"$out"; then
    echo "caught       $name: $(grep -Em1 "$evidence" <<<"$out" | sed 's/^ *//' | cut -c1-150)"
  else
    echo "MISSED       $name (exit $rc)"; tail -5 <<<"$out"; missed=$((missed+1))
  fi
  cp "$root/$file" "$file"   # pristine again for the next bug
}

# 1. swapped GEMM dimensions: y = x·Wᵀ computed as an [out × B] product
plant "swapped GEMM dims (linear forward)" layers/linear_cuda.cu \
  's/sp_cuda_gemm(stream, false, true, B, out, in,/sp_cuda_gemm(stream, false, true, out, B, in,/' \
  "" "cuda/linear_matches_cpu" "cudaemu: cublasSgemm|linear forward: err|linear .*: err"
# 2. missing stream synchronisation after a device->host copy
plant "missing stream sync (device->host copy)" core/kernels/cuda_backend.cu \
  '/cudaMemcpyAsync(dst->data, src->data/{n;s/sp_cuda_check(cudaStreamSynchronize(s));//}' \
  "" "cuda/fill_zero_and_copies" "round trip changed values|entry [0-9]+ ="
# 3. out-of-bounds kernel loop: one element past the end (SCANPROP_CUDA_ARENA=off: own allocation)
plant "out-of-bounds kernel loop (relu, i <= n)" layers/relu_cuda.cu \
  '0,/i < n;/s/i < n;/i <= n;/' \
  "SCANPROP_CUDA_ARENA=off" "cuda/relu_matches_cpu_bitwise" "cudaemu: out-of-bounds access"
# 4. host code dereferencing device memory (the loss gradient read on the host)
plant "host dereference of device memory (softmax_ce δ)" layers/softmax_ce_cuda.cu \
  's/const ce_saved \*s = (const ce_saved \*)n->saved;/const ce_saved *s = (const ce_saved *)n->saved; if (dy->data[0] == 12345.0f) return;/' \
  "SCANPROP_EMU_PROTECT=1" "cuda/softmax_ce_matches_cpu" "cudaemu: host code touched device memory"
# 5. missing __syncthreads before thread 0 reads the other threads' shared-memory losses
plant "missing __syncthreads (softmax_ce loss)" layers/softmax_ce_cuda.cu \
  '0,/__syncthreads();/s/__syncthreads();//' \
  "" "cuda/softmax_ce_matches_cpu" "softmax_ce loss .*err"
# 6. wrong stream: a kernel on the legacy default stream instead of the lane's stream
plant "wrong stream (relu on the legacy stream)" layers/relu_cuda.cu \
  's/relu_forward_kernel<<<sp_cuda_blocks(n, 256), 256, 0, stream>>>/relu_forward_kernel<<<sp_cuda_blocks(n, 256), 256, 0, 0>>>/' \
  "" "cuda/relu_matches_cpu_bitwise" "relu forward: err"
# 7. invalid launch configuration: 2048 threads per block
plant "launch with 2048 threads per block (tanh)" layers/tanh_cuda.cu \
  's/tanh_forward_kernel<<<sp_cuda_blocks(n, 256), 256,/tanh_forward_kernel<<<sp_cuda_blocks(n, 2048), 2048,/' \
  "" "cuda/tanh_sigmoid_match_cpu" "invalid configuration argument"
# 8. a missing cross-stream event in the ooo engine's device executor: the δW stream no
#    longer waits for the δ stream (shuffle mode interleaves the streams at each sync)
plant "missing cudaStreamWaitEvent (ooo δ -> δW stream)" schedulers/backward/ooo_cuda.cu \
  's/sp_cuda_check(cudaStreamWaitEvent(s, x->done\[pr\], 0));/(void)0;/' \
  "SCANPROP_EMU_ORDER=shuffle" "ooo_cuda/every_order_bitwise_equals_device_linear_*" \
  "differs from the device linear engine|vs linear" test_ooo_cuda
# 9. a whole-step graph with the learning rate left a kernel argument (not read from the
#    device scalars): the replays repeat the captured step's rate while it changes per step
plant "device scalar left on the host (SGD lr in a replayed whole step)" optim/optim_cuda.cu \
  's/float neg_lr = sc ? sc->neg_lr : a.neg_lr;/float neg_lr = a.neg_lr;/' \
  "" "ooo_cuda/whole_step_graph_bitwise_equals_no_graph" "whole-step graph \(sgd\): step [0-9]+ loss" test_ooo_cuda
# 10. the labels copied from pageable host memory inside the captured step: the driver
#     (and the emulator) refuse the capture
plant "labels copied from pageable memory inside a capture (softmax_ce)" layers/softmax_ce_cuda.cu \
  's/if (n->dev_labels) {/if (false \&\& n->dev_labels) {/' \
  "" "ooo_cuda/whole_step_graph_bitwise_equals_no_graph" "softmax_ce_cuda.cu.*cudaMemcpyAsync.*not permitted when stream is capturing|pageable host memory" \
  test_ooo_cuda
# 11. a host synchronisation inside the captured step (softmax_ce waits for its kernel):
#     legal live, refused by a capture
plant "host sync inside a captured whole step (softmax_ce)" layers/softmax_ce_cuda.cu \
  's/    ce_forward_cuda(n->out.data, s->p, z->data, s->labels, B, K, st);/&\n    sp_cuda_check(cudaStreamSynchronize(st));/' \
  "" "ooo_cuda/whole_step_graph_bitwise_equals_no_graph" "cudaStreamSynchronize\(st\).*not permitted when stream is capturing" \
  test_ooo_cuda
# 12. the next step's forward no longer waits for each layer's update event (ooo on the
#     device, the forward overlapping the last δW/U): it reads weights before U_i
plant "forward without its wait for U_i (ooo next forward overlap)" schedulers/backward/ooo_cuda.cu \
  's/sp_cuda_check(cudaStreamWaitEvent(sp_cuda_stream(), x->done\[task\], 0));/(void)0;/' \
  "SCANPROP_EMU_ORDER=shuffle" "ooo_cuda/next_forward_overlaps_updates_bitwise_*" \
  "next forward overlapping .* vs linear|differs from the device linear engine" test_ooo_cuda

# 13. the bppsa device engine multiplies a level's batch in the wrong order: X·M instead of
#    M·X in the one cublasSgemmBatched of dense·dense and dense·vector products (the scan's
#    operator does not commute)
plant "swapped operands in bppsa's batched level product (cublasSgemmBatched)" schedulers/backward/bppsa_cuda.cu \
  's/\&one, dev + count, c, dev,/\&one, dev, c, dev + count,/' \
  "" "bppsa_cuda/mlp_every_depth_matches_linear" \
  "bppsa vs linear on the device: err|cudaemu: .*cublasSgemmBatched" test_bppsa_cuda

# 14-16. the DAG ops' twins: an off-by-one avgpool window, a missing barrier in batch
#    norm's block sum (a thread reads the total after another has started the next
#    sum), and add skipping its second input
plant "off-by-one avgpool window (a <= k)" layers/avgpool2d_cuda.cu \
  's/for (int a = 0; a < g.k; a++)/for (int a = 0; a <= g.k; a++)/' \
  "" "cuda/avgpool2d_matches_cpu_bitwise" "avgpool2d forward: err"
plant "missing __syncthreads (batchnorm2d block sum)" layers/batchnorm2d_cuda.cu \
  's/__syncthreads();   \/\* all have read red\[0\]/(void)0;   \/* all have read red[0]/' \
  "" "cuda/batchnorm2d_matches_cpu" "batchnorm2d .*err"
plant "add skips an input (i = 2)" layers/add_cuda.cu \
  's/n->ninputs > 1 ? sp_node_in(n, 1)->data : nullptr/nullptr/' \
  "" "cuda/add_concat_match_cpu_bitwise" "add forward differs"
# 17. bppsa's scan graph: a replay leaves the pointer slots' index at the levels' start, so
#     the weight gradients' gather uploads its addresses into a slot the graph reads
plant "bppsa scan graph: replay without skipping the graph's pointer slots" schedulers/backward/bppsa_cuda.cu \
  's/        c->next = c->next_after;/        (void)0;/' \
  "" "bppsa_cuda/scan_graph_bitwise_equals_live" \
  "allocations and copies with the graph|gradients with the graph differ" test_bppsa_cuda

# 18-19. cuDNN's RNN: a forward in inference mode leaves the backward nothing in the
#    reserve space; the weight blocks packed one gate off
plant "RNN forward in inference mode (no reserve for the backward)" layers/recurrent_cuda.cu \
  's/cudnnRNNForward(lane->cudnn, p->rnn, CUDNN_FWD_MODE_TRAINING/cudnnRNNForward(lane->cudnn, p->rnn, CUDNN_FWD_MODE_INFERENCE/' \
  "" "cuda/rnn_gru_match_cpu" "cudaemu: cudnnRNNBackwardData_v8: the reserve space"
plant "GRU weights packed one gate off" layers/recurrent_cuda.cu \
  's/size_t off\[4\] = {p->m_off\[g\], p->m_off\[G + g\]/size_t off[4] = {p->m_off[(g + 1) % G], p->m_off[G + g]/' \
  "" "cuda/rnn_gru_match_cpu" "gru forward: err"

if [ $missed -ne 0 ]; then echo "planted bugs: $missed not caught"; exit 1; fi
echo "planted bugs: all caught"
