#include "cli/view_command.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <vector>

#include "cli/exit_codes.h"
#include "cli/report_command.h"
#include "common/atomic_output.h"
#include "common/units.h"
#include "report/html_viewer.h"

namespace vramscope::cli {

namespace {

// "runs/step3.sqlite" -> "step3.html" (in the current directory).
std::string DefaultOutput(const std::string& input) {
  if (input.empty()) return "vramscope-example.html";
  std::string base = input.substr(input.rfind('/') == std::string::npos ? 0 : input.rfind('/') + 1);
  for (const char* ext : {".gz", ".sqlite", ".pickle", ".json", ".raw"}) {
    const std::string e = ext;
    if (base.size() > e.size() && base.compare(base.size() - e.size(), e.size(), e) == 0) {
      base.resize(base.size() - e.size());
    }
  }
  const size_t dot = base.rfind('.');
  if (dot != std::string::npos && dot > 0) base = base.substr(0, dot);
  if (base.empty()) base = "report";
  return base + ".html";
}

bool IsSqliteFile(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) return false;
  char magic[16] = {};
  const size_t n = std::fread(magic, 1, sizeof(magic), f);
  std::fclose(f);
  return n == sizeof(magic) &&
         std::string_view(magic, sizeof(magic)) == std::string_view("SQLite format 3\0", 16);
}

// A report database made for the page alone, removed when done.
class TemporaryReport {
 public:
  ~TemporaryReport() {
    if (!path_.empty()) std::remove(path_.c_str());
  }
  Status Make(const std::string& input, const std::string& project_root) {
    const char* tmp = std::getenv("TMPDIR");
    std::string pattern =
        std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/vramscope-view-XXXXXX";
    std::vector<char> name(pattern.begin(), pattern.end());
    name.push_back('\0');
    const int fd = mkstemp(name.data());
    if (fd < 0) {
      return InvalidInput(fmt::format(
          "cannot create a temporary report in {} (set TMPDIR to a writable folder)", pattern));
    }
    close(fd);
    path_ = name.data();
    ReportOptions report;
    report.input = input;
    report.output = path_;
    report.force = true;
    report.quiet = true;
    report.project_root = project_root;
    return WriteReport(report);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace

Status WriteViewerPage(const std::vector<std::string>& databases, const std::string& target,
                       bool overwrite, const std::string& title) {
  ASSIGN_OR_RETURN(AtomicOutput output, AtomicOutput::Prepare(target, overwrite));
  std::vector<report::ViewerReport> reports;
  for (const std::string& db : databases) {
    ASSIGN_OR_RETURN(report::ViewerReport r, report::LoadViewerReport(db));
    report::BuildViewerLod(r);
    reports.push_back(std::move(r));
  }
  std::vector<const report::ViewerReport*> pointers;
  for (const auto& r : reports) pointers.push_back(&r);
  std::string page_title = title;
  if (page_title.empty()) {
    page_title =
        reports.size() == 2 ? reports[0].title + " vs " + reports[1].title : reports[0].title;
  }
  RETURN_IF_ERROR(report::WriteHtmlViewer(output.temp_path(), pointers, page_title));
  return output.Commit();
}

namespace {

Status Run(const ViewOptions& options) {
  const std::string target = options.output.empty() ? DefaultOutput(options.input) : options.output;
  // Refuse an existing output before any work.
  { ASSIGN_OR_RETURN(AtomicOutput check, AtomicOutput::Prepare(target, options.force)); }
  std::vector<std::string> inputs{options.input};
  if (!options.compare.empty()) inputs.push_back(options.compare);
  std::vector<std::unique_ptr<TemporaryReport>> temporaries;
  std::vector<std::string> databases;
  for (const std::string& input : inputs) {
    if (!input.empty() && IsSqliteFile(input)) {
      databases.push_back(input);
      continue;
    }
    auto& temp = temporaries.emplace_back(std::make_unique<TemporaryReport>());
    RETURN_IF_ERROR(temp->Make(input, options.project_root));
    databases.push_back(temp->path());
  }
  RETURN_IF_ERROR(WriteViewerPage(databases, target, options.force, options.title));
  if (!options.quiet) {
    std::error_code ec;
    const auto bytes = static_cast<int64_t>(std::filesystem::file_size(target, ec));
    fmt::print("viewer written to {} ({}); open it in a browser\n", target,
               FormatBytes(ec ? 0 : bytes));
  }
  return Status::Ok();
}

}  // namespace

void RegisterViewCommand(CLI::App& app, ViewOptions& o) {
  CLI::App* cmd = app.add_subcommand(
      "view",
      "Write an interactive, self-contained HTML viewer (no network needed) of a report: memory "
      "over time by category or owner with zoom and hover, the allocator's segments at any "
      "moment, the breakdown and icicle graph at the peak, and two reports side by side with "
      "--compare. With no INPUT, shows the built-in example.");
  cmd->add_option("input", o.input,
                  "a report database from 'vramscope report', or any input 'report' reads "
                  "(snapshot pickle, profiler trace, memory timeline; gzipped or not)");
  cmd->add_option("--compare", o.compare,
                  "a second report or input to show beside the first (before/after, measured "
                  "vs predicted)");
  cmd->add_option("-o,--output", o.output,
                  "page to write (default: the input's name with .html, in the current "
                  "directory; vramscope-example.html for the built-in example)");
  cmd->add_option("--title", o.title, "the page's title (default: the inputs' names)");
  cmd->add_flag("--force", o.force, "overwrite the output if it exists");
  cmd->add_flag("-q,--quiet", o.quiet, "print nothing but errors");
  cmd->add_option("--project-root", o.project_root,
                  "stack frames under this folder are the user's code (for inputs that are not "
                  "report databases; default: the current directory)");
}

int RunViewCommand(const ViewOptions& options) {
  return RunAndReport(options.input, [&] { return Run(options); });
}

}  // namespace vramscope::cli
