/* device_counts.h — what a device backend has issued since it started, counted where
 * every call is checked (the CUDA backend's sp_cuda_check & co.), so the same counts come
 * from a GPU and from the CUDA emulator. A steady-state step's share is the difference of
 * two readings (sp_train_result.device_step; the JSON's "device_launches",
 * "device_syncs", ...). The readers are in core/device.h; this header is the type alone,
 * for the training loop's result. */
#ifndef SP_DEVICE_COUNTS_H
#define SP_DEVICE_COUNTS_H

typedef struct sp_device_counts {
    long long launches;        /* kernel launches and graph launches                    */
    long long library_calls;   /* cuBLAS, cuSPARSE and cuDNN calls                      */
    long long syncs;           /* host waits: stream, event or device synchronize       */
    long long allocs;          /* cudaMalloc, cudaMallocHost, cudaHostAlloc             */
    long long copies;          /* host<->device and device<->device copies (cudaMemcpy*) */
} sp_device_counts;

#endif
