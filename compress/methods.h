// Internal: the per-method compressors and their stateless payload decoders. Public entry points
// are makeCompressor() and decodePayload() in compressor.h.
#pragma once

#include <memory>
#include <span>

#include "compress/compressor.h"

namespace grapevine::compress::detail {

using Payload = std::span<const uint8_t>;
using Acc = std::span<float>;

std::unique_ptr<Compressor> makeDense(Method method, const kernels::Ops& ops);  // none/fp16/bf16
std::unique_ptr<Compressor> makeBlockQuant(Method method, const Options& o,
                                           const kernels::Ops& ops);
std::unique_ptr<Compressor> makeSign(const Options& o, const kernels::Ops& ops);
std::unique_ptr<Compressor> makeTopK(const Options& o, const kernels::Ops& ops);
std::unique_ptr<Compressor> makeRandK(const Options& o, const kernels::Ops& ops);
std::unique_ptr<Compressor> makeQsgd(const Options& o, const kernels::Ops& ops);
std::unique_ptr<Compressor> makeLowRank(const Options& o, size_t rows, size_t cols,
                                        const kernels::Ops& ops);

// Each decoder checks every invariant of the payload first; only then, and only when `apply`, it
// adds w * C into acc. With apply == false acc is never touched (checkPayload).
Status decodeDense(Method method, Payload p, float w, Acc acc, const kernels::Ops& ops, bool apply);
Status decodeBlockQuant(Method method, Payload p, float w, Acc acc, const kernels::Ops& ops,
                        bool apply);
Status decodeSign(Payload p, float w, Acc acc, const kernels::Ops& ops, bool apply);
// The sparse ones also record what they add into `journal` when one is given (SparseJournal).
Status decodeTopK(Payload p, float w, Acc acc, const kernels::Ops& ops, bool apply,
                  SparseJournal* journal = nullptr);
Status decodeRandK(Payload p, float w, Acc acc, const kernels::Ops& ops, bool apply,
                   SparseJournal* journal = nullptr);
Status decodeQsgd(Payload p, float w, Acc acc, const kernels::Ops& ops, bool apply);
Status decodeLowRank(Payload p, float w, Acc acc, const kernels::Ops& ops, bool apply);

FloatRegion topkFloatRegion(Payload p);
FloatRegion randkFloatRegion(Payload p);

// Rand-k position of stratum j of k over n elements (shared by encoder and decoder).
uint32_t randkIndex(uint64_t key, size_t n, size_t k, size_t j);

}  // namespace grapevine::compress::detail
