// scanops CPU back end: one translation unit per combine kind (scan_cpu_<kind>.cpp, over
// scan_cpu_kernels.h), each instantiating CpuRunner for its kind's dtypes only, so that they
// compile in parallel (one file held them all: 336 s alone on one core of the 2-core VM, the
// longest step of the build). scan_cpu() (scan_cpu.cpp) calls the one of p's kind.
#pragma once

#include "ops/scan_engine.h"

namespace scanops::cpu {
void scan_sum(const ScanProblem& p);
void scan_prod(const ScanProblem& p);
void scan_affine(const ScanProblem& p);
void scan_logaddexp(const ScanProblem& p);
void scan_max(const ScanProblem& p);
void scan_min(const ScanProblem& p);
// Segmented problems (Segments::reset), every kind (scan_cpu_segmented.cpp).
void scan_segmented(const ScanProblem& p);
// The reset form's mask of the jagged form's offsets (_segment_heads, registration/segments.cpp):
// heads (bool, total elements, contiguous) true at offsets[b] for each offsets[b] < total, false
// elsewhere. offsets: contiguous int64 or int32. Returns false, heads unspecified, unless the
// offsets start at 0, end at total and never decrease (the caller names the fault).
bool segment_heads(const at::Tensor& offsets, int64_t total, const at::Tensor& heads);
}  // namespace scanops::cpu
