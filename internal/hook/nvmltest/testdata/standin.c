/*
 * Copyright The gpufrac Authors.
 * SPDX-License-Identifier: Apache-2.0
 *
 * A stand-in libnvidia-ml.so.1 for gpufrac's tests: it exports the NVML
 * entry points gpufrac-cdi-hook loads, with the signatures and the refusals
 * nvml.h documents (go-nvml v0.13.4-1's pkg/nvml/nvml.h), and appends one
 * JSON line per call to the file named by GPUFRAC_NVML_STANDIN_RECORD.
 * GPUs come from GPUFRAC_NVML_STANDIN_GPUS ("UUID=TOTALBYTES,..."). Built
 * with -DNO_MEMORY_LIMITS it is a driver before r615, which has no
 * per-cgroup limit entry points.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef int nvmlReturn_t; /* nvmlReturn_enum: an int-sized enum */
enum {
	NVML_SUCCESS = 0,
	NVML_ERROR_UNINITIALIZED = 1,
	NVML_ERROR_INVALID_ARGUMENT = 2,
	NVML_ERROR_NOT_FOUND = 6,
	NVML_ERROR_OPERATING_SYSTEM = 17,
	NVML_ERROR_UNKNOWN = 999,
};
#define LIMIT_MAX 0xFFFFFFFFFFFFFFFFULL

/* The layouts nvml.h declares: a const char* then unsigned long longs. */
typedef struct {
	const char *nameSpace;
	unsigned long long softLimit;
	unsigned long long hardLimit;
} setLimits_v1;
typedef struct {
	const char *nameSpace;
	unsigned long long softLimit;
	unsigned long long hardLimit;
	unsigned long long currentUsed;
} getLimits_v1;

#define MAX_GPUS 16
#define MAX_SET 64
#define MAGIC 0x6e766d6cu

struct gpu {
	unsigned magic;
	char uuid[96]; /* NVML_DEVICE_UUID_V2_BUFFER_SIZE */
	unsigned long long total;
};
struct set { int gpu; char *cgroup; unsigned long long soft, hard; };

static struct gpu gpus[MAX_GPUS];
static int ngpus;
static int initialised; /* nvmlInit_v2 is counted; nvmlShutdown undoes one */

static void json_string(FILE *f, const char *s) {
	fputc('"', f);
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;
		if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
		else if (c < 0x20) fprintf(f, "\\u%04x", c);
		else fputc(c, f);
	}
	fputc('"', f);
}

/* record appends {"call":...,"ret":...,<extra>} to the record file. */
static nvmlReturn_t record(const char *call, nvmlReturn_t ret, const char *uuid, const setLimits_v1 *l) {
	const char *path = getenv("GPUFRAC_NVML_STANDIN_RECORD");
	if (path == NULL || *path == 0) return ret;
	FILE *f = fopen(path, "a");
	if (f == NULL) return NVML_ERROR_UNKNOWN;
	fprintf(f, "{\"call\":\"%s\",\"ret\":%d", call, ret);
	if (uuid != NULL) { fputs(",\"uuid\":", f); json_string(f, uuid); }
	if (l != NULL) {
		fputs(",\"nameSpace\":", f);
		json_string(f, l->nameSpace);
		fprintf(f, ",\"softLimit\":%llu,\"hardLimit\":%llu,\"structSize\":%zu", l->softLimit, l->hardLimit, sizeof(*l));
	}
	fputs("}\n", f);
	fclose(f);
	return ret;
}

static void load_gpus(void) {
	const char *spec = getenv("GPUFRAC_NVML_STANDIN_GPUS");
	ngpus = 0;
	if (spec == NULL) return;
	char *copy = strdup(spec), *save = NULL;
	for (char *tok = strtok_r(copy, ",", &save); tok && ngpus < MAX_GPUS; tok = strtok_r(NULL, ",", &save)) {
		char *eq = strchr(tok, '=');
		if (eq == NULL || (size_t)(eq - tok) >= sizeof(gpus[0].uuid)) continue;
		*eq = 0;
		gpus[ngpus].magic = MAGIC;
		strcpy(gpus[ngpus].uuid, tok);
		gpus[ngpus].total = strtoull(eq + 1, NULL, 10);
		ngpus++;
	}
	free(copy);
}

nvmlReturn_t nvmlInit_v2(void) {
	if (initialised++ == 0) load_gpus();
	return record("nvmlInit_v2", NVML_SUCCESS, NULL, NULL);
}

nvmlReturn_t nvmlShutdown(void) {
	if (initialised == 0) return record("nvmlShutdown", NVML_ERROR_UNINITIALIZED, NULL, NULL);
	initialised--;
	return record("nvmlShutdown", NVML_SUCCESS, NULL, NULL);
}

const char *nvmlErrorString(nvmlReturn_t r) {
	switch (r) {
	case NVML_SUCCESS: return "Success";
	case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
	case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
	case NVML_ERROR_NOT_FOUND: return "Not Found";
	case NVML_ERROR_OPERATING_SYSTEM: return "OS Call Failed";
	}
	return "Unknown Error";
}

nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, struct gpu **device) {
	if (!initialised) return record("nvmlDeviceGetHandleByUUID", NVML_ERROR_UNINITIALIZED, NULL, NULL);
	if (uuid == NULL || device == NULL) return record("nvmlDeviceGetHandleByUUID", NVML_ERROR_INVALID_ARGUMENT, NULL, NULL);
	for (int i = 0; i < ngpus; i++) {
		if (strcmp(gpus[i].uuid, uuid) == 0) {
			*device = &gpus[i];
			return record("nvmlDeviceGetHandleByUUID", NVML_SUCCESS, uuid, NULL);
		}
	}
	return record("nvmlDeviceGetHandleByUUID", NVML_ERROR_NOT_FOUND, uuid, NULL);
}

#ifndef NO_MEMORY_LIMITS
/* The limits set in this process, for nvmlDeviceGetMemoryLimits_v1. */
static struct set sets[MAX_SET];
static int nsets;

static int valid(const struct gpu *d) {
	return d >= gpus && d < gpus + ngpus && d->magic == MAGIC;
}

/* cgroup_opens is what NVML documents as OPERATING_SYSTEM: the path must
 * name a directory it can open. */
static int cgroup_opens(const char *path) {
	int fd = open(path, O_RDONLY | O_DIRECTORY);
	if (fd < 0) return 0;
	close(fd);
	return 1;
}

nvmlReturn_t nvmlDeviceSetMemoryLimits_v1(struct gpu *d, setLimits_v1 *l) {
	const char *call = "nvmlDeviceSetMemoryLimits_v1";
	if (!initialised) return record(call, NVML_ERROR_UNINITIALIZED, NULL, NULL);
	if (!valid(d) || l == NULL || l->nameSpace == NULL) return record(call, NVML_ERROR_INVALID_ARGUMENT, NULL, NULL);
	if (l->softLimit > l->hardLimit || l->softLimit > d->total || (l->hardLimit > d->total && l->hardLimit != LIMIT_MAX))
		return record(call, NVML_ERROR_INVALID_ARGUMENT, d->uuid, l);
	if (!cgroup_opens(l->nameSpace)) return record(call, NVML_ERROR_OPERATING_SYSTEM, d->uuid, l);
	if (nsets < MAX_SET) {
		sets[nsets] = (struct set){(int)(d - gpus), strdup(l->nameSpace), l->softLimit, l->hardLimit};
		nsets++;
	}
	return record(call, NVML_SUCCESS, d->uuid, l);
}

nvmlReturn_t nvmlDeviceGetMemoryLimits_v1(struct gpu *d, getLimits_v1 *l) {
	const char *call = "nvmlDeviceGetMemoryLimits_v1";
	if (!initialised) return record(call, NVML_ERROR_UNINITIALIZED, NULL, NULL);
	if (!valid(d) || l == NULL || l->nameSpace == NULL) return record(call, NVML_ERROR_INVALID_ARGUMENT, NULL, NULL);
	setLimits_v1 seen = {l->nameSpace, 0, 0};
	if (!cgroup_opens(l->nameSpace)) return record(call, NVML_ERROR_OPERATING_SYSTEM, d->uuid, &seen);
	for (int i = nsets - 1; i >= 0; i--) {
		if (sets[i].gpu == (int)(d - gpus) && strcmp(sets[i].cgroup, l->nameSpace) == 0) {
			l->softLimit = sets[i].soft;
			l->hardLimit = sets[i].hard;
			l->currentUsed = 0;
			seen.softLimit = l->softLimit;
			seen.hardLimit = l->hardLimit;
			return record(call, NVML_SUCCESS, d->uuid, &seen);
		}
	}
	return record(call, NVML_ERROR_NOT_FOUND, d->uuid, &seen);
}
#endif
