#include "report/input_reports.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string_view>

#include "pipeline/analyze.h"
#include "pipeline/load.h"
#include "report/report_input.h"
#include "report/sqlite_report.h"

namespace vramscope::report {

bool IsSqliteFile(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) return false;
  char magic[16] = {};
  const size_t n = std::fread(magic, 1, sizeof(magic), f);
  std::fclose(f);
  return n == sizeof(magic) &&
         std::string_view(magic, sizeof(magic)) == std::string_view("SQLite format 3\0", 16);
}

InputReports::~InputReports() {
  for (const std::string& path : temporaries_) std::remove(path.c_str());
}

Status InputReports::Add(const std::string& path, const InputReportsRequest& request) {
  const pipeline::Input input = pipeline::ClassifyInput(path);
  if (input.kind == pipeline::InputKind::kFile && IsSqliteFile(path)) {
    if (request.window.active()) {
      return UsageError(fmt::format(
          "{}: a report database holds a whole report; a window (--from/--to/--step-range) cuts "
          "a recording: give the snapshot it was made from",
          path));
    }
    databases_.push_back(path);
    return Status::Ok();
  }
  const char* tmp = std::getenv("TMPDIR");
  const std::string pattern =
      std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/vramscope-report-XXXXXX";
  std::vector<char> name(pattern.begin(), pattern.end());
  name.push_back('\0');
  const int fd = mkstemp(name.data());
  if (fd < 0) {
    return InvalidInput(fmt::format(
        "cannot create a temporary report in {} (set TMPDIR to a writable folder)", pattern));
  }
  close(fd);
  // Owned from here: removed by the destructor whatever happens next.
  temporaries_.emplace_back(name.data());
  pipeline::LoadRequest load;
  load.input = input;
  load.control = request.control;
  load.project_root = request.project_root;
  load.limits = request.limits;
  load.window = request.window;
  ASSIGN_OR_RETURN(pipeline::Loaded loaded, pipeline::Load(load));
  ASSIGN_OR_RETURN(
      const std::unique_ptr<const pipeline::Analyzed> analyzed,
      pipeline::Analyze(std::move(loaded), {request.project_root, std::nullopt, request.control}));
  request.control.Stage(fmt::format("writing the report for {}", request.purpose));
  RETURN_IF_ERROR(WriteSqliteReport(temporaries_.back(), ReportInput::From(*analyzed), nullptr,
                                    request.control));
  databases_.push_back(temporaries_.back());
  return Status::Ok();
}

}  // namespace vramscope::report
