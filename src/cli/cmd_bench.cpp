// `hearth bench`: llama-bench-style throughput rows. pp N: one prefill of N random tokens into
// a fresh sequence (logits of the last token only, as llama-bench does). tg N: N single-token
// decode steps from a fresh sequence. With -d D every sequence first holds D random tokens
// (untimed; rows "@ dD", llama-bench's -d). Each test runs once to warm up, then -r times; the
// row shows mean ± sample standard deviation of tokens/s.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>

#include "backend/token_pick.h"
#include "cli/command.h"
#include "cli/common.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "runtime/generate.h"

namespace hearth::cli {

namespace {

struct BenchOptions {
  ModelOptions model;
  std::vector<int64_t> n_prompt{512};
  std::vector<int64_t> n_gen{128};
  int repetitions = 3;
  int64_t prefill_chunk = 0;  // 0: the model's default (512 CPU, 2048 CUDA)
  bool sampled = false;       // decode samples (T 0.8, top-k 40, top-p 0.95, min-p 0.05) instead
  std::vector<int64_t> parallel{1};  // sequences decoding together (tg rows)
  std::vector<int64_t> depth{0};     // tokens already in each sequence before a test
};

std::vector<int32_t> random_tokens(const Model& model, int64_t n, std::mt19937& rng) {
  std::uniform_int_distribution<int32_t> dist(0, int32_t(model.info().n_vocab - 1));
  std::vector<int32_t> tokens(static_cast<size_t>(n));
  for (auto& t : tokens) t = dist(rng);
  return tokens;
}

// A sequence holding `depth` random tokens (not timed). Its last logits come back to the host:
// on a GPU that waits for the prefill to finish, which would otherwise still be running when the
// timed work that follows starts, and be counted in it.
std::unique_ptr<SequenceState> sequence_at(Model& model, int64_t depth, int64_t chunk,
                                           std::mt19937& rng) {
  auto state = model.new_sequence();
  std::vector<float> logits;
  if (depth > 0) prefill(model, *state, random_tokens(model, depth, rng), chunk, &logits);
  return state;
}

double run_prompt(Model& model, int64_t n, int64_t depth, int64_t chunk, std::mt19937& rng) {
  const std::vector<int32_t> tokens = random_tokens(model, n, rng);
  auto state = sequence_at(model, depth, chunk, rng);
  std::vector<float> logits;
  auto t0 = std::chrono::steady_clock::now();
  prefill(model, *state, tokens, chunk, &logits);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

double run_gen(Model& model, int64_t n, int64_t depth, bool sampled, std::mt19937& rng) {
  std::uniform_real_distribution<double> draw(0.0, 1.0);
  auto state = sequence_at(model, depth, 0, rng);
  int32_t token = random_tokens(model, 1, rng)[0];
  // The decode loop as generation runs it: each step's logits give the next input through the
  // backend's picker (on a GPU only the token id crosses to the host when it picks there), and
  // where the model picks ahead each step is queued before the previous one's token is taken.
  TokenPick pick;
  if (sampled) pick = {0.8f, 40, 0.95f, 0.05f, 0.0};
  auto t0 = std::chrono::steady_clock::now();
  if (model.picks_ahead() && n > 0) {
    pick.u = draw(rng);
    model.queue_pick(*state, token, pick);
    for (int64_t i = 1; i < n; ++i) {
      pick.u = draw(rng);
      model.queue_pick(*state, Model::kPickedToken, pick);
      token = model.take_pick();
    }
    token = model.take_pick();
  } else {
    for (int64_t i = 0; i < n; ++i) {
      pick.u = draw(rng);
      token = model.forward_pick(*state, std::span<const int32_t>(&token, 1), pick);
    }
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// n decode steps of `batch` fresh sequences together (Model::forward_batch), as the engine steps
// its running requests; each sequence's next input is picked from its own logits row: by the
// backend where the model runs on a GPU (only the ids come back), else on the host.
double run_gen_batch(Model& model, int64_t n, int64_t batch, int64_t depth, bool sampled,
                     std::mt19937& rng) {
  const int64_t n_vocab = model.info().n_vocab;
  const bool on_device = model.device() != Device::CPU;
  std::uniform_real_distribution<double> draw(0.0, 1.0);
  std::vector<std::unique_ptr<SequenceState>> states;
  std::vector<int32_t> tokens = random_tokens(model, batch, rng),
                       inputs(static_cast<size_t>(batch));
  std::vector<float> logits(on_device ? 0 : size_t(batch * n_vocab));
  for (int64_t b = 0; b < batch; ++b) states.push_back(sequence_at(model, depth, 0, rng));
  TokenPick pick;
  if (sampled) pick = {0.8f, 40, 0.95f, 0.05f, 0.0};
  std::vector<TokenPick> picks(static_cast<size_t>(batch), pick);
  std::vector<std::pair<float, int32_t>> scratch;
  std::vector<Model::BatchItem> items(static_cast<size_t>(batch));
  auto t0 = std::chrono::steady_clock::now();
  for (int64_t step = 0; step < n; ++step) {
    inputs = tokens;
    for (int64_t b = 0; b < batch; ++b) {
      Model::BatchItem& item = items[size_t(b)];
      item = {states[size_t(b)].get(), std::span<const int32_t>(&inputs[size_t(b)], 1)};
      picks[size_t(b)].u = draw(rng);
      if (on_device) {
        item.pick = &picks[size_t(b)];
        item.token = &tokens[size_t(b)];
      } else {
        item.logits = logits.data() + b * n_vocab;
      }
    }
    model.forward_batch(items);
    if (on_device) continue;
    for (int64_t b = 0; b < batch; ++b)
      tokens[size_t(b)] =
          pick_token_host(std::span<float>(logits.data() + b * n_vocab, size_t(n_vocab)),
                          picks[size_t(b)], scratch);
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// "2.87 TB/s", "457.1 GFLOP/s": the rate in the unit that keeps it readable.
std::string achieved(double per_second, const char* unit) {
  char buf[32];
  if (per_second >= 1e12)
    std::snprintf(buf, sizeof buf, "%.2f T%s/s", per_second / 1e12, unit);
  else
    std::snprintf(buf, sizeof buf, "%.1f G%s/s", per_second / 1e9, unit);
  return buf;
}

// One row: the rate's mean ± sample standard deviation, and what it achieved — for decode the
// bytes read per second: the weights (ModelInfo::decode_bytes, read once per step of `batch`
// sequences) and each sequence's KV cache at its mean length over the test (kv_positions;
// kv_bytes_per_token counts sliding layers as if they kept every position, and a recurrent
// state is not counted); for a prefill of n tokens 2 FLOPs per active parameter per token, the
// head's only once (logits of the last token; attention not counted).
void print_row(const BenchOptions& o, const ModelInfo& info, const std::string& test,
               const std::vector<double>& rates, bool decode, int64_t n_tokens, int64_t batch = 1,
               double kv_positions = 0) {
  double mean = 0, var = 0;
  for (double r : rates) mean += r;
  mean /= double(rates.size());
  for (double r : rates) var += (r - mean) * (r - mean);
  const double sd = rates.size() > 1 ? std::sqrt(var / double(rates.size() - 1)) : 0.0;
  const double step_bytes =
      double(info.decode_bytes) + double(batch) * double(info.kv_bytes_per_token) * kv_positions;
  const std::string rate = decode ? achieved(mean / double(batch) * step_bytes, "B")
                                  : achieved(mean * 2.0 *
                                                 (double(info.active_params - info.head_params) +
                                                  double(info.head_params) / double(n_tokens)),
                                             "FLOP");
  std::printf("| %-24s | %9.2f GiB | %8.2f B | %-7s | %7d | %16s | %10.2f ± %-7.2f | %16s |\n",
              info.model_type.c_str(), double(info.weight_bytes) / (1u << 30),
              double(info.n_params) / 1e9, o.model.device.c_str(), ThreadPool::global().size(),
              test.c_str(), mean, sd, rate.c_str());
  std::fflush(stdout);
}

int run_bench(BenchOptions& o) {
  if (o.repetitions < 1) fail("-r/--repetitions must be >= 1, got {}", o.repetitions);
  for (int64_t d : o.depth)
    if (d < 0) fail("-d/--depth must be >= 0, got {}", d);
  for (int64_t batch : o.parallel)
    if (batch < 1) fail("--parallel must be >= 1, got {}", batch);
  auto model = load_model_from(o.model);
  std::mt19937 rng(1234);
  std::printf("| %-24s | %13s | %10s | %-7s | %7s | %16s | %20s | %16s |\n", "model", "size",
              "params", "backend", "threads", "test", "t/s", "achieved");
  std::printf("| %s | %s | %s | %s | %s | %s | %s | %s |\n", std::string(24, '-').c_str(),
              std::string(13, '-').c_str(), std::string(10, '-').c_str(),
              std::string(7, '-').c_str(), std::string(7, '-').c_str(),
              std::string(16, '-').c_str(), std::string(20, '-').c_str(),
              std::string(16, '-').c_str());
  for (int64_t depth : o.depth) {
    const std::string at = depth > 0 ? " @ d" + std::to_string(depth) : "";
    for (int64_t n : o.n_prompt) {
      if (n <= 0) continue;
      // Warm-up: page cache, scratch, thread spin-up.
      run_prompt(*model, n, depth, o.prefill_chunk, rng);
      std::vector<double> rates;
      for (int r = 0; r < o.repetitions; ++r)
        rates.push_back(double(n) / run_prompt(*model, n, depth, o.prefill_chunk, rng));
      print_row(o, model->info(), "pp" + std::to_string(n) + at, rates, false, n);
    }
    for (int64_t n : o.n_gen) {
      if (n <= 0) continue;
      for (int64_t batch : o.parallel) {
        auto time = [&](int64_t steps) {
          return batch == 1 ? run_gen(*model, steps, depth, o.sampled, rng)
                            : run_gen_batch(*model, steps, batch, depth, o.sampled, rng);
        };
        time(std::min<int64_t>(n, 16));
        std::vector<double> rates;
        for (int r = 0; r < o.repetitions; ++r) rates.push_back(double(n * batch) / time(n));
        std::string test = "tg" + std::to_string(n) + (o.sampled ? "s" : "");
        if (batch > 1) test += " x" + std::to_string(batch);
        print_row(o, model->info(), test + at, rates, true, 1, batch,
                  double(depth) + double(n + 1) / 2.0);
      }
    }
  }
  return 0;
}

CommandRegistration bench_command(
    "bench", "measure prefill and decode throughput (llama-bench style)", [](CLI::App& sub) {
      auto o = std::make_shared<BenchOptions>();
      add_model_options(sub, o->model);
      sub.add_option("-p,--n-prompt", o->n_prompt, "prompt lengths (0 = skip)")->delimiter(',');
      sub.add_option("-n,--n-gen", o->n_gen, "tokens to generate (0 = skip)")->delimiter(',');
      sub.add_option("-r,--repetitions", o->repetitions, "timed runs per test")
          ->capture_default_str();
      sub.add_option("--ubatch", o->prefill_chunk,
                     "prefill chunk size (0: the device's default, 512 on the CPU, 2048 on CUDA)")
          ->capture_default_str();
      sub.add_option("--parallel", o->parallel,
                     "sequences decoding together in the tg tests (row tgN xB: tokens/s over all "
                     "of them, as the engine steps concurrent requests)")
          ->delimiter(',')
          ->capture_default_str();
      sub.add_option("-d,--depth", o->depth,
                     "tokens already in each sequence before the tests (rows '@ dD'; not timed)")
          ->delimiter(',')
          ->capture_default_str();
      sub.add_flag("--sampled", o->sampled,
                   "decode with sampling (T 0.8, top-k 40, top-p 0.95, min-p 0.05; row tgNs) "
                   "instead of greedy");
      sub.add_flag("--gdn-recurrent-prefill", o->model.gdn_recurrent_prefill,
                   "Qwen3.5 family: prefill through the Gated DeltaNet recurrence instead of the "
                   "chunked delta rule (to compare the two)");
      return [o] { return run_bench(*o); };
    });

}  // namespace
}  // namespace hearth::cli
