#include "cli/view_command.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <vector>

#include "cli/exit_codes.h"
#include "cli/input_flags.h"
#include "cli/output_target.h"
#include "common/atomic_output.h"
#include "common/units.h"
#include "pipeline/analyze.h"
#include "pipeline/load.h"
#include "report/html_viewer.h"
#include "report/report_input.h"
#include "report/sqlite_report.h"

namespace vramscope::cli {

namespace {

bool IsSqliteFile(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) return false;
  char magic[16] = {};
  const size_t n = std::fread(magic, 1, sizeof(magic), f);
  std::fclose(f);
  return n == sizeof(magic) &&
         std::string_view(magic, sizeof(magic)) == std::string_view("SQLite format 3\0", 16);
}

// A report database made for the page alone (through the pipeline, as `report` makes it),
// removed when done.
class TemporaryReport {
 public:
  ~TemporaryReport() {
    if (!path_.empty()) std::remove(path_.c_str());
  }
  Status Make(const pipeline::Input& input, const std::string& project_root,
              const pipeline::InputLimits& limits, Progress& progress) {
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
    pipeline::LoadOptions load;
    load.progress = &progress;
    load.project_root = project_root;
    load.limits = limits;
    ASSIGN_OR_RETURN(pipeline::Loaded loaded, pipeline::Load(input, load));
    ASSIGN_OR_RETURN(std::unique_ptr<pipeline::Analyzed> analyzed,
                     pipeline::Analyze(std::move(loaded), {project_root, std::nullopt, &progress}));
    progress.Stage("writing the report for the page");
    return report::WriteSqliteReport(path_, report::ReportInput::From(*analyzed));
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

Status Run(const ViewOptions& options) {
  const pipeline::Input first = pipeline::ClassifyInput(options.input);
  const bool named = !options.output.empty();
  const std::string target = named ? options.output : pipeline::DefaultOutputName(first, "html");
  // Refuse an existing output before any work; a default-named page replaces only an earlier
  // vramscope page.
  RETURN_IF_ERROR(CheckOutputIsItsOwn(target, {options.input, options.compare}));
  bool replaces_earlier = false;
  {
    ASSIGN_OR_RETURN(PreparedOutput check,
                     PrepareOutput(target, named, report::OutputKind::kViewerPage, options.force));
    replaces_earlier = check.replaces_earlier;
  }
  ASSIGN_OR_RETURN(const std::string project_root,
                   pipeline::ResolveProjectRoot(options.project_root));
  std::vector<std::string> inputs{options.input};
  if (!options.compare.empty()) inputs.push_back(options.compare);
  Progress progress(!options.quiet);
  std::vector<std::unique_ptr<TemporaryReport>> temporaries;
  std::vector<std::string> databases;
  for (const std::string& path : inputs) {
    const pipeline::Input input = pipeline::ClassifyInput(path);
    if (input.kind == pipeline::InputKind::kFile && IsSqliteFile(path)) {
      databases.push_back(path);
      continue;
    }
    auto& temp = temporaries.emplace_back(std::make_unique<TemporaryReport>());
    RETURN_IF_ERROR(temp->Make(input, project_root, options.limits, progress));
    databases.push_back(temp->path());
  }
  progress.Stage(fmt::format("building the viewer page {}", target));
  RETURN_IF_ERROR(
      report::WriteViewerPage(databases, target, options.force || replaces_earlier, options.title));
  progress.Finish();
  if (!options.quiet) {
    std::error_code ec;
    const auto bytes = static_cast<int64_t>(std::filesystem::file_size(target, ec));
    fmt::print("viewer written to {} ({}){}; open it in a browser\n", target,
               FormatBytes(ec ? 0 : bytes), ReplacedNote(replaces_earlier));
  }
  return Status::Ok();
}

}  // namespace

void RegisterViewCommand(CLI::App& app, ViewOptions& o) {
  CLI::App* cmd = app.add_subcommand(
      "view",
      "Write an interactive, self-contained HTML viewer (no network needed) of a report: memory "
      "over time by category or owner with zoom and hover, the allocator's segments at any "
      "moment, the breakdown and icicle graph at the peak, two reports side by side with "
      "--compare, and the ranks of a capture folder side by side. With no INPUT, shows the "
      "built-in example.");
  cmd->add_option("input", o.input,
                  "a report database from 'vramscope report', or any input 'report' reads "
                  "(snapshot pickle, profiler trace, memory timeline, native trace, gzipped or "
                  "not, or a capture folder); omit it for the built-in example");
  cmd->add_option("--compare", o.compare,
                  "a second report or input to show beside the first (before/after, measured "
                  "vs predicted)");
  cmd->add_option("-o,--output", o.output,
                  "page to write (default: the input's name with .html, in the current "
                  "directory; report.html inside a capture folder; vramscope-example.html for the "
                  "built-in example; a default-named page replaces the one an earlier run "
                  "wrote, never another file)");
  cmd->add_option("--title", o.title, "the page's title (default: the inputs' names)");
  cmd->add_flag("--force", o.force, "overwrite the page -o names if it exists");
  cmd->add_flag("-q,--quiet", o.quiet, "print nothing but errors");
  cmd->add_option("--project-root", o.project_root,
                  "stack frames under this folder are the user's code (for inputs that are not "
                  "report databases; default: the current directory)");
  AddInputLimitFlags(*cmd, o.limits);
}

int RunViewCommand(const ViewOptions& options) {
  return RunAndReport(options.input, [&] { return Run(options); });
}

}  // namespace vramscope::cli
