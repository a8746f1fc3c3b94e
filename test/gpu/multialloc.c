// multialloc: one CUDA process on two GPUs, as a container with a share of
// two GPUs under one MPS server (issue 35 item 4; docs/design/nvidia/mps-multi-gpu.md
// M6-M7, inferred). Built with gcc alone like memalloc: the driver API
// comes from libcuda.so.1.
//
//   multialloc <MiB on device 0> <MiB on device 1> [hold-seconds]
//
// creates a context on devices 0 and 1 (the server's GPUs as it remaps
// them), allocates in 256 MiB chunks up to the given MiB on each and prints
// "device D: allocated N MiB, stopped by: <error>". With hold-seconds it
// keeps the memory, synchronising every context once a second; when one
// fails it prints "held: device D: <result>" for every device (CUDA_SUCCESS
// for one still working) and exits 4; otherwise "held: N s", exit 0.
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

typedef int CUresult;
typedef int CUdevice;
typedef void *CUcontext;
typedef unsigned long long CUdeviceptr;

static CUresult (*cuGetErrorName)(CUresult, const char **);

static const char *errname(CUresult r) {
	const char *name = "?";
	if (r == 0) return "CUDA_SUCCESS";
	cuGetErrorName(r, &name);
	return name;
}

int main(int argc, char **argv) {
	if (argc < 3) { fprintf(stderr, "usage: multialloc MiB0 MiB1 [hold-seconds]\n"); return 2; }
	long want[2] = {atol(argv[1]), atol(argv[2])};
	long hold = argc > 3 ? atol(argv[3]) : 0;
	void *lib = dlopen("libcuda.so.1", RTLD_NOW);
	if (!lib) { fprintf(stderr, "multialloc: %s\n", dlerror()); return 2; }
	CUresult (*cuInit)(unsigned) = dlsym(lib, "cuInit");
	CUresult (*cuDeviceGet)(CUdevice *, int) = dlsym(lib, "cuDeviceGet");
	CUresult (*cuCtxCreate)(CUcontext *, unsigned, CUdevice) = dlsym(lib, "cuCtxCreate_v2");
	CUresult (*cuCtxSetCurrent)(CUcontext) = dlsym(lib, "cuCtxSetCurrent");
	CUresult (*cuMemAlloc)(CUdeviceptr *, size_t) = dlsym(lib, "cuMemAlloc_v2");
	CUresult (*cuCtxSynchronize)(void) = dlsym(lib, "cuCtxSynchronize");
	cuGetErrorName = dlsym(lib, "cuGetErrorName");
	if (!cuInit || !cuDeviceGet || !cuCtxCreate || !cuCtxSetCurrent || !cuMemAlloc || !cuCtxSynchronize || !cuGetErrorName) {
		fprintf(stderr, "multialloc: libcuda lacks a driver API entry point\n");
		return 2;
	}
	CUcontext ctx[2];
	CUresult r = cuInit(0);
	for (int d = 0; d < 2 && r == 0; d++) {
		CUdevice dev;
		if ((r = cuDeviceGet(&dev, d)) == 0) r = cuCtxCreate(&ctx[d], 0, dev);
	}
	if (r) { fprintf(stderr, "multialloc: CUDA set-up on two devices failed: %s\n", errname(r)); return 2; }
	const size_t chunk = 256UL << 20;
	for (int d = 0; d < 2; d++) {
		long got = 0;
		CUdeviceptr p;
		r = cuCtxSetCurrent(ctx[d]);
		while (r == 0 && got + 256 <= want[d]) {
			if ((r = cuMemAlloc(&p, chunk)) != 0) break;
			got += 256;
		}
		printf("device %d: allocated %ld MiB, stopped by: %s\n", d, got, r ? errname(r) : "max reached");
	}
	fflush(stdout);
	for (long i = 0; i < hold; i++) {
		sleep(1);
		CUresult s[2];
		for (int d = 0; d < 2; d++) {
			s[d] = cuCtxSetCurrent(ctx[d]);
			if (s[d] == 0) s[d] = cuCtxSynchronize();
		}
		if (s[0] || s[1]) {
			for (int d = 0; d < 2; d++) printf("held: device %d: %s\n", d, errname(s[d]));
			return 4;
		}
	}
	if (hold > 0) printf("held: %ld s\n", hold);
	return 0;
}
