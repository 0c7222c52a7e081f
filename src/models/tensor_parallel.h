// Tensor parallelism (Megatron-style) on the CPU: one Model made of N rank models, each holding
// its shard of the weights and run on its own thread with its own backend and share of the
// cores, talking through a Communicator (docs/design-notes.md, "Tensor parallelism").
//
// A rank model is an architecture's model built with a TensorShard. Its contract, which
// TensorParallelModel relies on:
// - every rank is called with the same tokens, rows and batch items, and calls the same
//   collectives in the same order (so none waits for a collective another skips);
// - the residual stream is replicated: after each row-parallel product's all-reduce every rank
//   holds the same bits, so LogitsRows::Hidden is every rank's full hidden state;
// - logits cover only the rank's part of the vocabulary, shard_range(n_vocab, rank, world): a
//   forward writes [rows, that part's size]; info().n_vocab stays the whole vocabulary;
// - forward_batch is given no picks (TensorParallelModel picks on the host from the gathered
//   logits).
#pragma once
#include <functional>
#include <memory>

#include "models/model.h"
#include "parallel/communicator.h"

namespace hearth {

// Which shard of a tensor-parallel model a rank model holds; world 1 is the whole model.
struct TensorShard {
  int rank = 0;
  int world = 1;
  Communicator* comm = nullptr;  // null when world is 1
};

// Builds rank `rank`'s model; called on that rank's thread, for every rank at once.
using RankModelFactory = std::function<std::unique_ptr<Model>(int rank, Communicator& comm)>;

// The model of `world` ranks built by make_rank; its forward passes run one thread per rank.
std::unique_ptr<Model> make_tensor_parallel_model(int world, const RankModelFactory& make_rank);

}  // namespace hearth
