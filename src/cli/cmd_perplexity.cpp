// `sluice perplexity MODEL -f TEXT`: the model's perplexity on a text, over fixed windows, the
// way llama.cpp's llama-perplexity computes it (eval/perplexity.h), with its ± estimate.
//
//   sluice perplexity m-f16.gguf -f text.txt --save-logits base.logits   the reference's
//   sluice perplexity m-q4_0.gguf --kl-divergence base.logits             KL, top-1, Δppl
//
// The windows run through the engine (Engine::score), several per step, on every core; --tp /
// --pp split the model over ranks as `sluice run` does.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/commands.h"
#include "cli/engine_session.h"
#include "cli/parallel_session.h"
#include "cli/progress.h"
#include "eval/logits_file.h"
#include "eval/perplexity.h"

namespace sluice::cli {
namespace {

struct PerplexityOptions {
  std::string model;
  std::string text_file;
  int stride = 0;   // 0: --ctx-size (non-overlapping windows)
  int chunks = -1;  // windows at most (-1: all)
  std::string save_logits;
  std::string kl_divergence;
  std::string output_format = "text";
  EngineCliOptions engine;
  bool ctx_given = false;  // --ctx-size was on the command line
  bool stride_given = false;
};

// The text as llama-perplexity reads it: the file's bytes less one trailing newline.
Result<std::string> read_ppl_text(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) {
    return make_error("cannot read text file '", path, "' (no such file)");
  }
  std::ifstream f(path, std::ios::binary);
  if (!f) return make_error("cannot read text file '", path, "'");
  std::stringstream ss;
  ss << f.rdbuf();
  std::string text = ss.str();
  if (!text.empty() && text.back() == '\n') text.pop_back();
  if (text.empty()) return make_error("text file '", path, "' is empty");
  return text;
}

uint64_t fingerprint_of(const Vocab& v) {
  std::vector<std::string> texts;
  texts.reserve(size_t(v.n_tokens()));
  for (int32_t t = 0; t < v.n_tokens(); ++t) texts.push_back(v.text(t));
  return eval::vocab_fingerprint(texts);
}

std::string file_name(const std::string& path) {
  return std::filesystem::path(path).filename().string();
}

// The reference's file must describe this model's vocabulary and, with -f, this text.
Status check_reference(const eval::LogitsFileHeader& h, const std::string& path, int32_t n_vocab,
                       uint64_t fingerprint, int32_t bos, const std::vector<int32_t>* text_tokens) {
  if (h.n_vocab != n_vocab) {
    return make_error("'", path, "' holds logits over ", h.n_vocab, " tokens (model '", h.label,
                      "'); this model has ", n_vocab, ": another vocabulary");
  }
  if (h.vocab_fingerprint != fingerprint || h.bos != bos) {
    return make_error("'", path, "' was saved with another vocabulary (model '", h.label,
                      "'): its token texts differ from this model's");
  }
  if (text_tokens && *text_tokens != h.tokens) {
    return make_error("'", path, "' was saved on another text (", h.tokens.size(),
                      " tokens; -f gives ", text_tokens->size(),
                      text_tokens->size() == h.tokens.size() ? " that differ)" : ")");
  }
  return {};
}

nlohmann::ordered_json ppl_json(const eval::PerplexityResult& r) {
  return {
      {"ppl", r.ppl}, {"ppl_error", r.ppl_error}, {"mean_nll", r.mean_nll}, {"tokens", r.n_tokens}};
}

void print_kl_report(const eval::KlStats::Report& r, const std::string& base_label) {
  std::printf("====== Perplexity statistics (base: %s) ======\n", base_label.c_str());
  std::printf("Mean PPL(Q)                   : %10.6f ± %10.6f\n", r.ppl.ppl, r.ppl.ppl_error);
  std::printf("Mean PPL(base)                : %10.6f ± %10.6f\n", r.ppl_base.ppl,
              r.ppl_base.ppl_error);
  std::printf("Cor(ln(PPL(Q)), ln(PPL(base))): %6.2f%%\n", 100 * r.ppl_correlation);
  std::printf("Mean ln(PPL(Q)/PPL(base))     : %10.6f ± %10.6f\n", r.ln_ppl_ratio,
              r.ln_ppl_ratio_error);
  std::printf("Mean PPL(Q)/PPL(base)         : %10.6f ± %10.6f\n", std::exp(r.ln_ppl_ratio),
              std::exp(r.ln_ppl_ratio) * r.ln_ppl_ratio_error);
  std::printf("Mean PPL(Q)-PPL(base)         : %10.6f ± %10.6f\n\n", r.delta_ppl,
              r.delta_ppl_error);
  std::printf("====== KL divergence statistics ======\n");
  std::printf("Mean    KLD: %10.6f ± %10.6f\n", r.kld_mean, r.kld_mean_error);
  std::printf("Maximum KLD: %10.6f\n", r.kld_max);
  std::printf("99.0%%   KLD: %10.6f\n", r.kld_p99);
  std::printf("90.0%%   KLD: %10.6f\n", r.kld_p90);
  std::printf("Median  KLD: %10.6f\n\n", r.kld_median);
  std::printf("====== Token probability statistics ======\n");
  std::printf("RMS Δp    : %6.3f %%\n", 100 * r.rms_delta_p);
  std::printf("Same top p: %6.3f ± %5.3f %%\n", 100 * r.top1_agreement,
              100 * r.top1_agreement_error);
}

nlohmann::ordered_json kl_json(const eval::KlStats::Report& r, const std::string& base_label) {
  return {{"base", base_label},
          {"ppl_base", ppl_json(r.ppl_base)},
          {"ppl_correlation", r.ppl_correlation},
          {"ln_ppl_ratio", r.ln_ppl_ratio},
          {"ln_ppl_ratio_error", r.ln_ppl_ratio_error},
          {"delta_ppl", r.delta_ppl},
          {"delta_ppl_error", r.delta_ppl_error},
          {"kld_mean", r.kld_mean},
          {"kld_mean_error", r.kld_mean_error},
          {"kld_median", r.kld_median},
          {"kld_p90", r.kld_p90},
          {"kld_p99", r.kld_p99},
          {"kld_max", r.kld_max},
          {"top1_agreement", r.top1_agreement},
          {"top1_agreement_error", r.top1_agreement_error},
          {"rms_delta_p", r.rms_delta_p}};
}

// The engine options every rank derives the same way: one window per sequence (the window of
// the reference's file in KL mode), as many sequences per step as --max-batch-tokens allows,
// times the steps in flight with pipeline stages.
Result<EngineCliOptions> engine_options_for(const PerplexityOptions& o) {
  if (!o.kl_divergence.empty() && !o.save_logits.empty()) {
    return make_error("give --save-logits (the reference's run) or --kl-divergence, not both");
  }
  if (o.kl_divergence.empty() && o.text_file.empty()) {
    return make_error("give the text with -f FILE");
  }
  if (o.engine.spec != "none") return make_error("--spec does not apply to perplexity");
  if (o.stride < 0 || o.chunks < -1 || o.chunks == 0) {
    return make_error("--stride must be >= 0 and --chunks >= 1");
  }
  EngineCliOptions e = o.engine;
  if (!o.kl_divergence.empty()) {
    SLUICE_ASSIGN_OR_RETURN(eval::LogitsReader r, eval::LogitsReader::open(o.kl_divergence));
    const eval::WindowPlan& p = r.header().plan;
    if ((o.ctx_given && o.engine.ctx_size != p.n_ctx) || (o.stride_given && o.stride != p.stride)) {
      return make_error("'", o.kl_divergence, "' was saved with --ctx-size ", p.n_ctx, " --stride ",
                        p.stride, "; leave them out or give the same");
    }
    e.ctx_size = p.n_ctx;
  }
  if (e.ctx_size < 3) {
    return make_error(
        "--ctx-size must be >= 3: the window's tokens (the model's context, 0, is "
        "not taken here)");
  }
  e.max_batch_tokens = std::max(e.max_batch_tokens, e.ctx_size);
  const int depth = e.pp > 1 ? (e.pp_depth > 0 ? e.pp_depth : e.pp) : 1;
  e.max_seqs = std::max(1, e.max_batch_tokens / e.ctx_size) * depth;
  e.no_prefix_cache = true;
  return e;
}

Status run_perplexity(const PerplexityOptions& o, const EngineCliOptions& e) {
  std::string text;
  if (!o.text_file.empty()) {
    SLUICE_ASSIGN_OR_RETURN(text, read_ppl_text(o.text_file));
  }
  std::optional<eval::LogitsReader> reference;
  if (!o.kl_divergence.empty()) {
    SLUICE_ASSIGN_OR_RETURN(eval::LogitsReader r, eval::LogitsReader::open(o.kl_divergence));
    reference.emplace(std::move(r));
  }
  const int32_t n_ctx = e.ctx_size;
  const int32_t stride = o.stride > 0 ? o.stride : n_ctx;
  SLUICE_ASSIGN_OR_RETURN(auto s, open_engine_session(o.model, e));
  const Vocab& vocab = s->tokenizer.vocab();
  const int32_t n_vocab = s->exec().capacity().n_vocab;
  const int32_t bos = vocab.add_bos() ? vocab.bos() : -1;
  const uint64_t fingerprint = fingerprint_of(vocab);

  std::vector<int32_t> tokens;
  if (!text.empty()) {
    EncodeOptions eo;
    eo.add_eos = false;
    SLUICE_ASSIGN_OR_RETURN(tokens, s->tokenizer.encode(text, eo));
  }
  if (reference) {
    SLUICE_RETURN_IF_ERROR(check_reference(reference->header(), o.kl_divergence, n_vocab,
                                           fingerprint, bos, text.empty() ? nullptr : &tokens));
    tokens = reference->header().tokens;
  }
  eval::WindowPlan plan;
  if (reference) {
    plan = reference->header().plan;
  } else {
    Result<eval::WindowPlan> p = eval::plan_windows(int64_t(tokens.size()), n_ctx, stride);
    if (!p.ok()) return make_error("'", o.text_file, "': ", p.message());
    plan = *p;
  }
  const int32_t n_windows = o.chunks > 0 ? std::min(plan.n_windows, o.chunks) : plan.n_windows;
  std::vector<std::vector<int32_t>> windows;
  windows.reserve(size_t(n_windows));
  for (int32_t w = 0; w < n_windows; ++w)
    windows.push_back(eval::window_tokens(tokens, plan, w, bos));

  std::optional<eval::LogitsWriter> writer;
  if (!o.save_logits.empty()) {
    eval::LogitsFileHeader h;
    h.n_vocab = n_vocab;
    h.plan = plan;
    h.plan.n_windows = n_windows;
    h.bos = bos;
    h.vocab_fingerprint = fingerprint;
    h.tokens = tokens;
    h.label = file_name(o.model);
    SLUICE_ASSIGN_OR_RETURN(eval::LogitsWriter w, eval::LogitsWriter::create(o.save_logits, h));
    writer.emplace(std::move(w));
  }

  eval::MeanStats nll;
  eval::KlStats kld;
  std::vector<float> rows;  // [n_scored, n_vocab]: log-probabilities (saved or the reference's)
  ProgressBar bar("perplexity", "windows");
  const size_t nv = size_t(n_vocab);
  const Status st =
      s->engine->score(windows, [&](size_t w, std::span<const float> logits) -> Status {
        if (reference) SLUICE_RETURN_IF_ERROR(reference->read_window(rows));
        if (writer) rows.resize(size_t(plan.n_scored()) * nv);
        for (int32_t p = plan.first_scored; p < plan.n_ctx; ++p) {
          // Token p, predicted by the logits after tokens 0..p-1.
          const std::span<const float> row = logits.subspan(size_t(p - 1) * nv, nv);
          const int32_t token = windows[w][size_t(p)];
          const size_t k = size_t(p - plan.first_scored);
          if (reference) {
            kld.add(std::span<const float>(rows).subspan(k * nv, nv), row, token);
          } else {
            nll.add(eval::log_sum_exp(row) - double(row[size_t(token)]));
            if (writer) eval::log_softmax(row, std::span<float>(rows).subspan(k * nv, nv));
          }
        }
        if (writer) SLUICE_RETURN_IF_ERROR(writer->write_window(rows));
        char note[64] = "";
        if (!reference) std::snprintf(note, sizeof note, "ppl %.4f", eval::perplexity_of(nll).ppl);
        bar.update(w + 1, uint64_t(n_windows), note);
        return {};
      });
  SLUICE_RETURN_IF_ERROR(st);
  if (writer) SLUICE_RETURN_IF_ERROR(writer->close());

  const EngineStats& es = s->engine->stats();
  const int64_t n_computed = int64_t(n_windows) * plan.n_ctx;
  const double secs = es.busy_seconds;
  const std::string source = o.text_file.empty() ? "the text saved in " + file_name(o.kl_divergence)
                                                 : file_name(o.text_file);
  std::optional<eval::KlStats::Report> report;
  if (reference) report = kld.report();
  const eval::PerplexityResult ppl = reference ? report->ppl : eval::perplexity_of(nll);
  if (o.output_format == "json") {
    nlohmann::ordered_json j;
    j["model"] = file_name(o.model);
    j["text"] = source;
    j["text_tokens"] = tokens.size();
    j["ctx_size"] = plan.n_ctx;
    j["stride"] = plan.stride;
    j["windows"] = n_windows;
    j["scored_per_window"] = plan.n_scored();
    j["bos"] = bos >= 0;
    j["ppl"] = ppl.ppl;
    j["ppl_error"] = ppl.ppl_error;
    j["mean_nll"] = ppl.mean_nll;
    j["scored_tokens"] = ppl.n_tokens;
    if (report) j["kl"] = kl_json(*report, reference->header().label);
    if (writer) j["saved_logits"] = o.save_logits;
    j["timings"] = {{"seconds", secs},
                    {"steps", es.steps},
                    {"tokens_per_s", secs > 0 ? double(n_computed) / secs : 0.0}};
    // A label from the reference's file may be any bytes: replaced, never thrown on.
    std::printf("%s\n", j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    return {};
  }
  std::printf("perplexity of %s on %s: %zu tokens, %d windows of %d (stride %d), %d scored each\n",
              file_name(o.model).c_str(), source.c_str(), tokens.size(), n_windows, plan.n_ctx,
              plan.stride, plan.n_scored());
  if (report) {
    print_kl_report(*report, reference->header().label);
  } else {
    std::printf("Final estimate: PPL = %.4f +/- %.5f\n", ppl.ppl, ppl.ppl_error);
  }
  if (writer) std::printf("saved the log-probabilities to %s\n", o.save_logits.c_str());
  std::fprintf(stderr, "%lld tokens in %llu steps, %.2f s (%.0f tokens/s)\n", (long long)n_computed,
               (unsigned long long)es.steps, secs, secs > 0 ? double(n_computed) / secs : 0.0);
  return {};
}

}  // namespace

void register_perplexity(CLI::App& app, int& exit_code) {
  auto o = std::make_shared<PerplexityOptions>();
  o->engine.ctx_size = 512;  // llama-perplexity's default window
  CLI::App* cmd = app.add_subcommand(
      "perplexity", "A model's perplexity on a text; KL divergence against a reference's logits");
  cmd->add_option("model", o->model, "GGUF file or hf://OWNER/REPO/FILE.gguf")->required();
  cmd->add_option("-f,--file", o->text_file,
                  "The text (with --kl-divergence: optional, checked against the saved one)");
  cmd->add_option("--stride", o->stride,
                  "Tokens between window starts (0: --ctx-size, non-overlapping windows; below "
                  "--ctx-size/2 each window scores its last STRIDE tokens)")
      ->capture_default_str();
  cmd->add_option("--chunks", o->chunks, "Windows at most (-1: all)")->capture_default_str();
  cmd->add_option("--save-logits", o->save_logits,
                  "Save this (reference) model's log-probabilities at the scored tokens to FILE");
  cmd->add_option("--kl-divergence", o->kl_divergence,
                  "Compare with the reference saved in FILE (--save-logits): KL divergence, top-1 "
                  "agreement, change of perplexity");
  cmd->add_option("--output-format", o->output_format, "text or json")
      ->check(CLI::IsMember({"text", "json"}))
      ->capture_default_str();
  add_engine_options(cmd, o->engine);
  cmd->get_option("--ctx-size")->description("Tokens per window (llama-perplexity's -c)");
  cmd->get_option("--max-seqs")
      ->description("Not used: windows per step are --max-batch-tokens / --ctx-size");
  cmd->callback([o, cmd, &exit_code] {
    o->ctx_given = cmd->count("--ctx-size") > 0;
    o->stride_given = cmd->count("--stride") > 0;
    Result<EngineCliOptions> e = engine_options_for(*o);
    if (!e.ok()) {
      exit_code = report_error("perplexity", e.message());
      return;
    }
    if (auto code = take_rank("perplexity", o->model, *e)) {
      exit_code = *code;
      return;
    }
    const Status st = run_perplexity(*o, *e);
    if (!st.ok()) exit_code = report_error("perplexity", st.message());
  });
}

}  // namespace sluice::cli
