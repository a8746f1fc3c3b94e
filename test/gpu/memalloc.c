// memalloc: allocate GPU memory in 256 MiB chunks until the driver refuses,
// and print how much it got. Built with gcc alone: the CUDA driver API is
// loaded at run time from libcuda.so.1, so no CUDA toolkit is needed.
//
//   memalloc [max-MiB [hold-seconds]]   print "allocated N MiB, stopped by: <error>",
//   keep the memory for hold-seconds (so its use can be read), exit 0
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

typedef int CUresult;
typedef int CUdevice;
typedef void *CUcontext;
typedef unsigned long long CUdeviceptr;

int main(int argc, char **argv) {
	long max_mib = argc > 1 ? atol(argv[1]) : 1L << 22;
	void *lib = dlopen("libcuda.so.1", RTLD_NOW);
	if (!lib) { fprintf(stderr, "memalloc: %s\n", dlerror()); return 2; }
	CUresult (*cuInit)(unsigned) = dlsym(lib, "cuInit");
	CUresult (*cuDeviceGet)(CUdevice *, int) = dlsym(lib, "cuDeviceGet");
	CUresult (*cuCtxCreate)(CUcontext *, unsigned, CUdevice) = dlsym(lib, "cuCtxCreate_v2");
	CUresult (*cuMemAlloc)(CUdeviceptr *, size_t) = dlsym(lib, "cuMemAlloc_v2");
	CUresult (*cuGetErrorName)(CUresult, const char **) = dlsym(lib, "cuGetErrorName");
	if (!cuInit || !cuDeviceGet || !cuCtxCreate || !cuMemAlloc || !cuGetErrorName) {
		fprintf(stderr, "memalloc: libcuda lacks a driver API entry point\n");
		return 2;
	}
	CUdevice dev; CUcontext ctx; CUresult r;
	const char *name = "?";
	if ((r = cuInit(0)) || (r = cuDeviceGet(&dev, 0)) || (r = cuCtxCreate(&ctx, 0, dev))) {
		cuGetErrorName(r, &name);
		fprintf(stderr, "memalloc: CUDA set-up failed: %s\n", name);
		return 2;
	}
	long got = 0;
	CUdeviceptr p;
	const size_t chunk = 256UL << 20;
	while (got + 256 <= max_mib) {
		if ((r = cuMemAlloc(&p, chunk)) != 0) break;
		got += 256;
	}
	if (r) cuGetErrorName(r, &name); else name = "max reached";
	printf("allocated %ld MiB, stopped by: %s\n", got, name);
	fflush(stdout);
	if (argc > 2) sleep((unsigned)atoi(argv[2]));
	return 0;
}
