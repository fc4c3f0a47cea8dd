#include "report/view_outputs.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <memory>

#include "pipeline/analyze.h"
#include "pipeline/load.h"
#include "report/html_viewer.h"
#include "report/report_input.h"
#include "report/sqlite_report.h"

namespace vramscope::report {

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
  Status Make(const pipeline::Input& input, const ViewRequest& request) {
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
    pipeline::LoadRequest load;
    load.input = input;
    load.control = request.control;
    load.project_root = request.project_root;
    load.limits = request.limits;
    ASSIGN_OR_RETURN(pipeline::Loaded loaded, pipeline::Load(load));
    ASSIGN_OR_RETURN(const std::unique_ptr<const pipeline::Analyzed> analyzed,
                     pipeline::Analyze(std::move(loaded),
                                       {request.project_root, std::nullopt, request.control}));
    request.control.Stage("writing the report for the page");
    return WriteSqliteReport(path_, ReportInput::From(*analyzed), nullptr, request.control);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace

Status WriteView(const ViewRequest& request) {
  std::vector<std::unique_ptr<TemporaryReport>> temporaries;
  std::vector<std::string> databases;
  for (const std::string& path : request.inputs) {
    const pipeline::Input input = pipeline::ClassifyInput(path);
    if (input.kind == pipeline::InputKind::kFile && IsSqliteFile(path)) {
      databases.push_back(path);
      continue;
    }
    auto& temp = temporaries.emplace_back(std::make_unique<TemporaryReport>());
    RETURN_IF_ERROR(temp->Make(input, request));
    databases.push_back(temp->path());
  }
  request.control.Stage(fmt::format("building the viewer page {}", request.target));
  RETURN_IF_ERROR(WriteViewerPage(databases, request.target, request.overwrite, request.title,
                                  request.control));
  request.control.Finish();
  return Status::Ok();
}

}  // namespace vramscope::report
