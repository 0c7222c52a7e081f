// `hearth quantize`: writes a quantized copy of a float checkpoint in MLX's layout
// (quant/quantize_checkpoint.h). This file is the command line around it: options, SIGINT (the
// run stops at the next block of rows and removes its partial directory), progress and summary.
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <string>

#include "cli/command.h"
#include "core/error.h"
#include "quant/quantize_checkpoint.h"

namespace hearth::cli {
namespace {

struct QuantizeCliOptions {
  std::string in, out;
  std::string format = "affine";
  int bits = 4;
  int group_size = 64;
  std::string module_bits;
  int threads = 0;
};

std::atomic<bool> g_cancel{false};
static_assert(std::atomic<bool>::is_always_lock_free, "set from a signal handler");

void on_signal(int) { g_cancel.store(true); }

// Routes SIGINT and SIGTERM to g_cancel for its lifetime. SA_RESETHAND: a second Ctrl-C kills at
// once (leaving only OUT.partial-<pid>, which never looks like a checkpoint).
class CancelOnSignal {
 public:
  CancelOnSignal() {
    struct sigaction sa {};
    sa.sa_handler = on_signal;
    sa.sa_flags = SA_RESETHAND;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old_int_);
    sigaction(SIGTERM, &sa, &old_term_);
  }
  ~CancelOnSignal() {
    sigaction(SIGINT, &old_int_, nullptr);
    sigaction(SIGTERM, &old_term_, nullptr);
  }

 private:
  struct sigaction old_int_ {};
  struct sigaction old_term_ {};
};

std::string human_bytes(double b) {
  const char* units[] = {"B", "KB", "MB", "GB", "TB"};
  int u = 0;
  while (b >= 1000 && u < 4) b /= 1000, ++u;
  return fmt::format("{:.{}f} {}", b, u == 0 ? 0 : 2, units[u]);
}

std::string human_duration(double s) {
  if (s < 60) return fmt::format("{:.1f}s", s);
  const long t = long(s + 0.5);
  if (t < 3600) return fmt::format("{}m{:02}s", t / 60, t % 60);
  return fmt::format("{}h{:02}m", t / 3600, t / 60 % 60);
}

// On a terminal one line redrawn in place; otherwise (a log file) a line per ~10% of weights.
class ProgressPrinter {
 public:
  ProgressPrinter() : tty_(::isatty(STDERR_FILENO) != 0) {}
  void operator()(const quant::QuantizeProgress& p) {
    const double frac = p.weights_total ? double(p.weights_done) / double(p.weights_total) : 1;
    const double rate = p.seconds > 0 ? double(p.weights_done) / p.seconds : 0;
    const double eta = rate > 0 ? double(p.weights_total - p.weights_done) / rate : 0;
    const std::string line =
        fmt::format("quantize: {}/{} modules  {:.0f}%  {:.1f} M weights/s  ETA {}", p.modules_done,
                    p.modules_total, 100 * frac, rate / 1e6, human_duration(eta));
    if (tty_) {
      std::fprintf(stderr, "\r%s\x1b[K", line.c_str());
      if (p.modules_done == p.modules_total) std::fputc('\n', stderr);
    } else if (int(frac * 10) > last_decile_ || p.modules_done == p.modules_total) {
      last_decile_ = int(frac * 10);
      std::fprintf(stderr, "%s\n", line.c_str());
    }
    std::fflush(stderr);
  }
  void interrupted() {
    if (tty_) std::fputc('\n', stderr);
  }

 private:
  bool tty_;
  int last_decile_ = 0;
};

int run_quantize(const QuantizeCliOptions& o) {
  if (o.threads < 0) fail("--threads must be >= 1, got {}", o.threads);
  quant::QuantizeOptions q;
  q.spec.format = o.format;
  q.spec.params = {o.bits, o.group_size};
  q.spec.overrides = quant::parse_module_bits(o.module_bits);
  q.n_threads = o.threads;
  q.cancel = &g_cancel;
  q.on_plan = [](const quant::QuantizePlan& plan) {
    for (const auto& n : plan.notices) std::fprintf(stderr, "quantize: %s\n", n.c_str());
  };
  ProgressPrinter printer;
  q.on_progress = [&](const quant::QuantizeProgress& p) { printer(p); };

  g_cancel.store(false);
  CancelOnSignal signals;
  quant::QuantizeResult r;
  try {
    r = quant::quantize_checkpoint(o.in, o.out, q);
  } catch (const Error& e) {
    if (!g_cancel.load()) throw;
    printer.interrupted();
    std::fprintf(stderr, "hearth quantize: %s\n", e.what());
    return 130;  // the shell's code for a SIGINT
  }

  const double bpw_q =
      r.quantized_params ? 8.0 * double(r.quantized_bytes) / double(r.quantized_params) : 0;
  const double bpw_all =
      r.total_params ? 8.0 * double(r.output_tensor_bytes) / double(r.total_params) : 0;
  std::printf("wrote %s: %lld modules quantized (%s, %d bits, group %d), %zu file%s\n",
              r.out.c_str(), (long long)r.n_quantized, o.format.c_str(), o.bits, o.group_size,
              r.n_files, r.n_files == 1 ? "" : "s");
  std::printf(
      "bits per weight: %.3f in quantized modules (codes, scales, biases), %.3f overall "
      "(%lld params)\n",
      bpw_q, bpw_all, (long long)r.total_params);
  std::printf("size: %s -> %s (%.2fx smaller)\n", human_bytes(double(r.input_bytes)).c_str(),
              human_bytes(double(r.output_bytes)).c_str(),
              r.output_bytes ? double(r.input_bytes) / double(r.output_bytes) : 0.0);
  std::printf("time: %s (%.1f M weights/s quantized)\n", human_duration(r.seconds).c_str(),
              r.seconds > 0 ? double(r.quantized_params) / r.seconds / 1e6 : 0.0);
  return 0;
}

CommandRegistration reg(
    "quantize", "write a quantized copy of a checkpoint (MLX affine layout)", [](CLI::App& sub) {
      auto o = std::make_shared<QuantizeCliOptions>();
      sub.add_option("-m,--model", o->in, "input checkpoint directory (F32, F16 or BF16)")
          ->required();
      sub.add_option("-o,--output", o->out, "output directory (must not exist)")->required();
      sub.add_option("--format", o->format, "weight format: affine (MLX)")->capture_default_str();
      sub.add_option("--bits", o->bits, "bits per weight: 2, 3, 4, 5, 6 or 8")
          ->capture_default_str();
      sub.add_option("--group-size", o->group_size, "weights per scale and bias: 32, 64 or 128")
          ->capture_default_str();
      sub.add_option("--module-bits", o->module_bits,
                     "per-module bits by path suffix, e.g. 'mlp.down_proj=8,lm_head=false'");
      sub.add_option("-t,--threads", o->threads,
                     "CPU threads (default: the CPUs this process may use)");
      return [o] { return run_quantize(*o); };
    });

}  // namespace
}  // namespace hearth::cli
