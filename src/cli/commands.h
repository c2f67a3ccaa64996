// Subcommand registration. Each cmd_<name>.cpp adds one CLI11 subcommand whose callback
// sets `exit_code` (0 on success). Errors go to stderr as "sluice <cmd>: error: ...".
#pragma once

#include <CLI/CLI.hpp>
#include <string_view>

namespace sluice::cli {

void register_info(CLI::App& app, int& exit_code);
void register_tokenize(CLI::App& app, int& exit_code);
// `sluice vocab import`: a Hugging Face tokenizer.json -> a vocab-only GGUF.
void register_vocab(CLI::App& app, int& exit_code);
void register_template(CLI::App& app, int& exit_code);
void register_synth(CLI::App& app, int& exit_code);
void register_quantize(CLI::App& app, int& exit_code);
// `sluice perplexity`: perplexity over windows of a text; KL divergence against saved logits.
void register_perplexity(CLI::App& app, int& exit_code);
void register_bench(CLI::App& app, int& exit_code);
// Adds `bench throughput` to the `bench` subcommand (call after register_bench).
void register_bench_throughput(CLI::App& app, int& exit_code);
// Adds `bench serve` (a load generator for OpenAI-compatible servers) to `bench`.
void register_bench_serve(CLI::App& app, int& exit_code);
// Adds `bench grammar` (schema compile and token-mask times, no model) to `bench`.
void register_bench_grammar(CLI::App& app, int& exit_code);
void register_run(CLI::App& app, int& exit_code);
void register_plan(CLI::App& app, int& exit_code);
void register_serve(CLI::App& app, int& exit_code);
// `sluice router`: one endpoint in front of several OpenAI-compatible backends (src/router).
void register_router(CLI::App& app, int& exit_code);
void register_sim(CLI::App& app, int& exit_code);

// Prints "sluice <cmd>: error: <message>" to stderr and returns 1 (the exit code to set).
int report_error(std::string_view command, std::string_view message);

}  // namespace sluice::cli
