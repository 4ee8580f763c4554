#!/bin/sh
# install.sh PREFIX BUILD "LDLIBS" — make install: the static library, the headers
# (under PREFIX/include/scanprop, as the sources include them: "core/model.h"), the
# umbrella scanprop.h, the PyTorch helper python/scanprop_torch.py (under
# PREFIX/share/scanprop/python; `pkg-config --variable=pythondir scanprop` names the
# folder for PYTHONPATH) and PREFIX/lib/pkgconfig/scanprop.pc, whose Libs are this
# build's own link line (BLAS, oneDNN, MPI... as configured), so
#   cc prog.c $(pkg-config --cflags --libs scanprop)
# links. Nothing outside PREFIX is touched.
set -eu
prefix=$1 build=$2 ldlibs=$3
case $prefix in /*) ;; *) prefix=$(pwd)/$prefix ;; esac
[ -f "$build/libscanprop.a" ] || { echo "install: $build/libscanprop.a not built (run make)" >&2; exit 2; }
inc=$prefix/include/scanprop
py=$prefix/share/scanprop/python
mkdir -p "$prefix/lib/pkgconfig" "$inc" "$py"
cp "$build/libscanprop.a" "$prefix/lib/"
cp scanprop.h "$inc/"
# every header of the library's folders, subfolders included, at its source path
for h in $(find core layers optim schedulers data train cli -name '*.h'); do
    mkdir -p "$inc/$(dirname "$h")"
    cp "$h" "$inc/$h"
done
cp python/scanprop_torch.py "$py/"
cat > "$prefix/lib/pkgconfig/scanprop.pc" <<PC
prefix=$prefix
libdir=\${prefix}/lib
includedir=\${prefix}/include/scanprop
pythondir=\${prefix}/share/scanprop/python

Name: scanprop
Description: C11 deep-learning training with from-scratch autograd (linear, BPPSA and out-of-order back-propagation)
Version: 0.1
Cflags: -I\${includedir} -pthread
Libs: -L\${libdir} -lscanprop $ldlibs
PC
echo "installed scanprop into $prefix (pkg-config: $prefix/lib/pkgconfig/scanprop.pc)"
echo "python module: $py/scanprop_torch.py (PYTHONPATH=$py python3 -c 'import scanprop_torch')"
