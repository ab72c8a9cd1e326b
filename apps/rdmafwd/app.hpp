// The rdmafwd application object: run control shared by main, the prompt and telemetry.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <rdmx/rt/launcher.hpp>

#include "rdmafwd.hpp"
#include "setup.hpp"
#include "stats.hpp"

namespace rdmafwd {

struct App {
  Params prm;
  std::unique_ptr<Testbed> tb;
  std::unique_ptr<rt::Launcher> launcher;
  std::vector<unsigned> lcores;
  unsigned main_lcore = 0;
  std::string topology_text;
  std::string telemetry_path;
  bool quit = false;
  bool stats_shown = false;   // `stop` printed the statistics of the run that ended
  bool started_once = false;  // reset_stats ran before: device counts since setup went to a run
  // --cmdline-file: lines that did not parse (the exit status is then 2) and the first of them.
  unsigned script_errors = 0;
  std::string first_script_error;

  std::atomic<bool> running{false};
  // Set (release) once the testbed and prm are complete; telemetry handlers, which run on
  // DPDK's telemetry thread, answer nothing before they see it (acquire). DPDK's own locks are
  // invisible to TSan, so this is the happens-before edge the sanitizer can check.
  std::atomic<bool> published{false};
  std::atomic<uint64_t> run_start_tsc{0};
  std::atomic<uint64_t> run_cycles{0};  // forwarding time of finished runs since `clear stats`
  Snapshot base;                        // `start` or `clear stats`
  std::string since = "start";          // which of the two (written under mu)
  std::mutex mu;                        // census text (main writes, telemetry reads)
  std::vector<Testbed::PoolCensus> census;
  std::string census_text;
  bool census_ok = true;
  uint64_t last_period_tsc = 0;
  Snapshot last_period;

  // Main lcore.
  // resume: the lanes start again after a reconnect (--reconnect-for), the statistics and the
  // forwarding time carry on from the run they continue.
  Status start(bool resume = false);
  // Errors of runs cut short by a lost connection that the client re-established: the I/Os in
  // flight then (abandoned, counted) and the lanes that failed; not failures of this process.
  // The JSON summary's errors.excused (doc/guides/rdmafwd.md, "Statistics").
  uint64_t excused_errors = 0;
  Status stop();
  void flush_dead_lanes();  // main lcore, after the lanes ended (App::stop)
  void refresh_census();
  void reset_stats(const char* why);  // `start`, `clear stats`
  // Any thread.
  double seconds() const;
  Snapshot stats() const;
  Labels labels() const;
  bool finished() const;  // io-count reached, all lanes failed, or the client said goodbye
  std::string config_text() const;
  // Prints `show stats` (text or JSON, as --json says).
  void print_stats(const char* type, int exit_status = -1);
  void print_roce_stats();  // emu@roce: the RoCE v2 link's counters (summary only)
  void print_period();
  double period() const;  // seconds between periodic lines; 0 = none
  // 0 or 1 and the lines that say why: over every run of the session, or (this_run) only the
  // run since the last start (--serve-clients: each client's run on its own).
  int exit_status(bool this_run = false);
  FILE* text_out() const { return prm.json ? stderr : stdout; }
};

App& app();

// Prompt (cmdline.cpp). Returns when `quit`, end of input or a signal.
void run_prompt(App& a);
// One period of background duties while the prompt waits (periodic stats, duration, io-count).
void background_tick(App& a);
// Telemetry (telemetry.cpp).
void register_telemetry();

}  // namespace rdmafwd
