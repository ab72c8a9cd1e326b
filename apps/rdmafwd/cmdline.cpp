// The interactive prompt, on DPDK's cmdline library (tab completion on every keyword).
//
// A terminal on stdin: cmdline_stdin_new, fed by a poll(2) loop so periodic statistics, the
// duration and Ctrl-C are served while the prompt waits. A file (--cmdline-file) or a stdin that
// is not a terminal: read line by line, each line echoed after the prompt and run through
// cmdline_parse (scripts and tests).
#include <poll.h>
#include <unistd.h>

#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <string>
#include <thread>

#ifndef ALLOW_EXPERIMENTAL_API
#define ALLOW_EXPERIMENTAL_API  // cmdline_parse_check (a dry run, for helpful errors)
#endif
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wshadow"
#include <cmdline.h>
#include <cmdline_parse.h>
#include <cmdline_parse_num.h>
#include <cmdline_parse_string.h>
#include <cmdline_rdline.h>
#include <cmdline_socket.h>
#pragma GCC diagnostic pop

#include "app.hpp"
#include "options.hpp"

namespace rdmafwd {
namespace {

constexpr const char* kPrompt = "rdmafwd> ";

void say(cmdline* cl, const std::string& s) {
  cmdline_printf(cl, "%s", s.c_str());
}

// ---- start / stop / quit / help ---------------------------------------------------------------
struct OneWord {
  cmdline_fixed_string_t word;
};

void do_start(void*, cmdline* cl, void*) {
  App& a = app();
  if (Status s = a.start(); !s) {
    say(cl, "error: " + s.error().message + "\n");
    return;
  }
  say(cl, "forwarding started: fwd " + a.prm.fwd + " on " + std::to_string(a.lcores.size()) +
              " lane(s)\n");
}

void do_stop(void*, cmdline* cl, void*) {
  App& a = app();
  if (Status s = a.stop(); !s) {
    say(cl, "error: " + s.error().message + "\n");
    return;
  }
  say(cl, "forwarding stopped\n");
  if (!a.prm.json)
    say(cl, format_text(a.stats(), a.seconds(), a.labels()));
  else
    a.print_stats("stats");
  a.stats_shown = true;
}

void do_quit(void*, cmdline* cl, void*) {
  app().quit = true;
  cmdline_quit(cl);
}

std::string help_text() {
  return "commands (TAB completes):\n"
         "  start                 start forwarding on every lane\n"
         "  stop                  stop forwarding (drains in-flight I/O), print statistics\n"
         "  show stats            statistics since the last start or `clear stats`\n"
         "  show config           parameters, devices, cores\n"
         "  show windows          window census per pool and the invariant check (stopped)\n"
         "  show topology         machine topology and the placement of the lcores\n"
         "  set NAME VALUE        change an option while stopped, as --NAME VALUE would:\n"
         "                        " +
         settable_names(", ") +
         " (`show config` lists every option)\n"
         "  clear stats           reset the statistics (start resets them too)\n"
         "  sleep SECONDS         wait (scripts), serving periodic statistics\n"
         "  help                  this text\n"
         "  quit                  stop and exit\n";
}

void do_help(void*, cmdline* cl, void*) {
  say(cl, help_text());
}

cmdline_parse_token_string_t tok_start = TOKEN_STRING_INITIALIZER(OneWord, word, "start");
cmdline_parse_token_string_t tok_stop = TOKEN_STRING_INITIALIZER(OneWord, word, "stop");
cmdline_parse_token_string_t tok_quit = TOKEN_STRING_INITIALIZER(OneWord, word, "quit");
cmdline_parse_token_string_t tok_help = TOKEN_STRING_INITIALIZER(OneWord, word, "help");

cmdline_parse_inst_t cmd_start = {do_start,
                                  nullptr,
                                  "start: start forwarding",
                                  {(cmdline_parse_token_hdr_t*)&tok_start, nullptr}};
cmdline_parse_inst_t cmd_stop = {
    do_stop, nullptr, "stop: stop forwarding", {(cmdline_parse_token_hdr_t*)&tok_stop, nullptr}};
cmdline_parse_inst_t cmd_quit = {
    do_quit, nullptr, "quit: exit rdmafwd", {(cmdline_parse_token_hdr_t*)&tok_quit, nullptr}};
cmdline_parse_inst_t cmd_help = {
    do_help, nullptr, "help: list the commands", {(cmdline_parse_token_hdr_t*)&tok_help, nullptr}};

// ---- show stats|config|windows|topology -------------------------------------------------------
struct ShowCmd {
  cmdline_fixed_string_t show;
  cmdline_fixed_string_t what;
};

void do_show(void* parsed, cmdline* cl, void*) {
  App& a = app();
  const std::string what = static_cast<ShowCmd*>(parsed)->what;
  if (what == "stats") {
    if (a.prm.json)
      a.print_stats("stats");
    else
      say(cl, format_text(a.stats(), a.seconds(), a.labels()));
  } else if (what == "config") {
    std::string opts = "  options (* may be changed with `set NAME VALUE`):\n";
    for (const OptionDef& o : options())
      if (o.kind != ArgKind::kHelp)
        opts += std::string("    ") + (o.settable ? "* " : "  ") + o.name + " " +
                option_value(o, a.prm) + "\n";
    say(cl, "configuration:\n" + a.config_text() + opts);
  } else if (what == "windows") {
    if (a.running) {
      say(cl,
          "windows: forwarding is running; `stop` first (the census walks every window "
          "while no core uses them)\n");
      return;
    }
    a.refresh_census();
    std::string dump;
    const uint64_t reports = a.tb->checker_reports(&dump);
    std::lock_guard<std::mutex> g(a.mu);
    say(cl, "window census:\n" + a.census_text);
    say(cl, "emu PRM checker reports: " + std::to_string(reports) + "\n" + dump);
  } else if (what == "topology") {
    say(cl, a.topology_text);
  }
}

cmdline_parse_token_string_t tok_show = TOKEN_STRING_INITIALIZER(ShowCmd, show, "show");
cmdline_parse_token_string_t tok_show_what =
    TOKEN_STRING_INITIALIZER(ShowCmd, what, "stats#config#windows#topology");
cmdline_parse_inst_t cmd_show = {
    do_show,
    nullptr,
    "show stats|config|windows|topology",
    {(cmdline_parse_token_hdr_t*)&tok_show, (cmdline_parse_token_hdr_t*)&tok_show_what, nullptr}};

// ---- set NAME VALUE (the option table: options.hpp) --------------------------------------------
struct SetCmd {
  cmdline_fixed_string_t set;
  cmdline_fixed_string_t name;
  cmdline_fixed_string_t value;
};

bool stopped_or_say(cmdline* cl) {
  if (!app().running) return true;
  say(cl, "error: forwarding is running; `stop` first\n");
  return false;
}

// `set NAME VALUE`: an option the table marks settable, parsed as on the command line and
// checked with the others (check_params); any other option is refused in one line.
void do_set(void* parsed, cmdline* cl, void*) {
  App& a = app();
  auto* c = static_cast<SetCmd*>(parsed);
  const std::string name = c->name;
  const OptionDef* o = find_option(name);
  if (!o || !o->settable) {
    say(cl, "error: " +
                (o ? "--" + std::string(o->name) + " is fixed at start-up"
                   : "unknown option '" + name + "'") +
                " (set takes " + settable_names(", ") + ")\n");
    return;
  }
  // A value that does not parse is refused first, running or not (as a bad command is).
  Params p = a.prm;
  if (std::string e = apply_option(*o, "--" + std::string(o->name), c->value, p); !e.empty()) {
    say(cl, "error: " + e + "\n");
    return;
  }
  if (!stopped_or_say(cl)) return;
  if (std::string e = check_params(p); !e.empty()) {
    say(cl, "error: " + e + "\n");
    return;
  }
  {
    std::lock_guard<std::mutex> g(a.mu);  // telemetry's /rdmafwd/config reads prm
    a.prm = p;
  }
  say(cl, name + " set to " + option_value(*o, p) + "\n");
}

// NAME and VALUE are any word: an unknown or fixed option is refused with its reason.
cmdline_parse_token_string_t tok_set = TOKEN_STRING_INITIALIZER(SetCmd, set, "set");
cmdline_parse_token_string_t tok_set_name = TOKEN_STRING_INITIALIZER(SetCmd, name, nullptr);
cmdline_parse_token_string_t tok_set_value = TOKEN_STRING_INITIALIZER(SetCmd, value, nullptr);
cmdline_parse_inst_t cmd_set = {
    do_set,
    nullptr,
    "set NAME VALUE",
    {(cmdline_parse_token_hdr_t*)&tok_set, (cmdline_parse_token_hdr_t*)&tok_set_name,
     (cmdline_parse_token_hdr_t*)&tok_set_value, nullptr}};

// ---- clear stats -----------------------------------------------------------------------------
struct ClearCmd {
  cmdline_fixed_string_t clear;
  cmdline_fixed_string_t stats;
};
void do_clear(void*, cmdline* cl, void*) {
  app().reset_stats("clear stats");
  say(cl, "statistics cleared\n");
}
cmdline_parse_token_string_t tok_clear = TOKEN_STRING_INITIALIZER(ClearCmd, clear, "clear");
cmdline_parse_token_string_t tok_clear_stats = TOKEN_STRING_INITIALIZER(ClearCmd, stats, "stats");
cmdline_parse_inst_t cmd_clear = {do_clear,
                                  nullptr,
                                  "clear stats",
                                  {(cmdline_parse_token_hdr_t*)&tok_clear,
                                   (cmdline_parse_token_hdr_t*)&tok_clear_stats, nullptr}};

// ---- sleep SECONDS ---------------------------------------------------------------------------
struct SleepCmd {
  cmdline_fixed_string_t sleep;
  uint32_t secs;
};
void wait_serving(App& a, double secs) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(secs);
  while (std::chrono::steady_clock::now() < end && !g_signal.load()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    background_tick(a);
  }
}
void do_sleep(void* parsed, cmdline*, void*) {
  wait_serving(app(), static_cast<SleepCmd*>(parsed)->secs);
}
cmdline_parse_token_string_t tok_sleep = TOKEN_STRING_INITIALIZER(SleepCmd, sleep, "sleep");
cmdline_parse_token_num_t tok_sleep_n = TOKEN_NUM_INITIALIZER(SleepCmd, secs, RTE_UINT32);
cmdline_parse_inst_t cmd_sleep = {
    do_sleep,
    nullptr,
    "sleep SECONDS",
    {(cmdline_parse_token_hdr_t*)&tok_sleep, (cmdline_parse_token_hdr_t*)&tok_sleep_n, nullptr}};

cmdline_parse_ctx_t main_ctx[] = {&cmd_start, &cmd_stop, &cmd_show, &cmd_set, &cmd_clear,
                                  &cmd_sleep, &cmd_help, &cmd_quit, nullptr};

// The syntax of every command that starts with `word` ("set fwd umr|write|read|rpc|relay, set
// burst|pages N"), from the instances' help strings; empty when none does.
std::string syntax_of(const std::string& word) {
  std::string o;
  for (cmdline_parse_inst_t** i = main_ctx; *i; ++i) {
    std::string h = (*i)->help_str;
    h = h.substr(0, h.find(':'));
    if (h.compare(0, word.size(), word) != 0 || (h.size() > word.size() && h[word.size()] != ' '))
      continue;
    o += (o.empty() ? "" : ", ") + h;
  }
  return o;
}

// Why `line` (ending in a newline) does not parse, with the syntax of the commands it names;
// empty when it parses.
std::string parse_error(cmdline* cl, const std::string& line) {
  const int rc = cmdline_parse_check(cl, line.c_str());
  if (rc >= 0) return "";  // success: the length parsed
  const size_t b = line.find_first_not_of(" \t");
  const std::string word = line.substr(b, line.find_first_of(" \t\n", b) - b);
  const std::string syntax = syntax_of(word);
  if (rc == CMDLINE_PARSE_AMBIGUOUS) return "ambiguous command '" + word + "'; type 'help'";
  if (rc == CMDLINE_PARSE_BAD_ARGS && !syntax.empty())
    return "bad arguments for '" + word + "': " + syntax;
  return "unknown command '" + word + "'; type 'help' for the list";
}

bool blank_or_comment(const std::string& line) {
  const size_t b = line.find_first_not_of(" \t\r\n");
  return b == std::string::npos || line[b] == '#';
}

// One line from a file or a pipe: echo it, run it, explain a failure. Returns the error (empty
// when the line parsed).
std::string run_line(App& a, cmdline* cl, std::string line) {
  while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.pop_back();
  if (blank_or_comment(line)) return "";
  // cmdline_new printed the first prompt; every later one is printed after a command.
  cmdline_printf(cl, "%s\n", line.c_str());
  line += "\n";
  const std::string err = parse_error(cl, line);
  if (err.empty()) {
    cmdline_parse(cl, line.c_str());
    if (!a.quit) cmdline_printf(cl, "%s", kPrompt);
    return "";
  }
  cmdline_printf(cl, "error: %s\n%s", err.c_str(), kPrompt);
  return err;
}

// Terminal input: bytes go to the line editor (editing keys, TAB completion, history) as they
// come; at Enter, a line that does not parse gets the same error as in scripts (what is valid),
// instead of the library's bare "Bad arguments", and the prompt stays.
// False at the end of input (Ctrl-D on an empty line) or an editor error.
bool terminal_input(cmdline* cl, const char* buf, size_t n) {
  rdline* rdl = cmdline_get_rdline(cl);
  size_t from = 0;
  for (size_t i = 0; i < n; ++i) {
    if (buf[i] != '\n' && buf[i] != '\r') continue;
    if (i > from && cmdline_in(cl, buf + from, static_cast<int>(i - from)) < 0) return false;
    from = i;
    const std::string line = std::string(rdline_get_buffer(rdl)) + "\n";
    if (blank_or_comment(line)) continue;
    const std::string err = parse_error(cl, line);
    if (err.empty()) continue;  // Enter goes to the editor, which runs the command
    cmdline_printf(cl, "\nerror: %s\n", err.c_str());
    rdline_add_history(rdl, line.substr(0, line.size() - 1).c_str());
    rdline_newline(rdl, kPrompt);
    from = i + 1;  // this Enter is consumed
  }
  return n <= from || cmdline_in(cl, buf + from, static_cast<int>(n - from)) >= 0;
}

void run_lines(App& a, cmdline* cl, std::istream& in, bool script) {
  std::string line;
  unsigned n = 0;
  while (!a.quit && !g_signal.load() && std::getline(in, line)) {
    ++n;
    const std::string err = run_line(a, cl, line);
    if (script && !err.empty() && a.script_errors++ == 0)
      a.first_script_error = "line " + std::to_string(n) + ": " + err;
    background_tick(a);
  }
}

}  // namespace

void run_prompt(App& a) {
  if (!a.prm.cmdline_file.empty()) {
    std::ifstream f(a.prm.cmdline_file);
    cmdline* cl = cmdline_new(main_ctx, kPrompt, -1, STDOUT_FILENO);
    if (!f) {
      std::fprintf(stderr, "rdmafwd: cannot read --cmdline-file %s\n", a.prm.cmdline_file.c_str());
    } else if (cl) {
      std::printf("rdmafwd: running commands from %s\n", a.prm.cmdline_file.c_str());
      std::fflush(stdout);
      run_lines(a, cl, f, true);
      if (!a.quit) cmdline_printf(cl, "\n");
    }
    if (cl) cmdline_free(cl);
    // Without -i, the file was the whole session; a run it left going ends as usual.
    if (!a.prm.interactive) {
      while (a.running && !g_signal.load() && (a.prm.duration > 0 || a.prm.io_count)) {
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
        background_tick(a);
      }
      return;
    }
  }
  if (a.quit || g_signal.load()) return;

  if (!isatty(STDIN_FILENO)) {
    cmdline* cl = cmdline_new(main_ctx, kPrompt, -1, STDOUT_FILENO);
    if (!cl) return;
    run_lines(a, cl, std::cin, false);
    if (!a.quit) cmdline_printf(cl, "\n");
    cmdline_free(cl);
    return;
  }

  cmdline* cl = cmdline_stdin_new(main_ctx, kPrompt);
  if (!cl) return;
  while (!a.quit && !g_signal.load()) {
    pollfd pfd{STDIN_FILENO, POLLIN, 0};
    const int n = ::poll(&pfd, 1, 5);
    if (n > 0) {
      char buf[256];
      const ssize_t r = ::read(STDIN_FILENO, buf, sizeof buf);
      if (r <= 0) break;  // end of input
      if (!terminal_input(cl, buf, static_cast<size_t>(r))) break;
    }
    background_tick(a);
  }
  cmdline_printf(cl, "\n");
  cmdline_stdin_exit(cl);
}

}  // namespace rdmafwd
