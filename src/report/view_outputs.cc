#include "report/view_outputs.h"

#include <fmt/format.h>

#include "report/html_viewer.h"
#include "report/input_reports.h"

namespace vramscope::report {

Status WriteView(const ViewRequest& request) {
  InputReports reports;
  const InputReportsRequest each{request.project_root, request.limits, request.control, "the page",
                                 request.window};
  for (const std::string& path : request.inputs) RETURN_IF_ERROR(reports.Add(path, each));
  const std::vector<std::string>& databases = reports.databases();
  request.control.Stage(fmt::format("building the viewer page {}", request.target));
  RETURN_IF_ERROR(WriteViewerPage(databases, request.target, request.overwrite, request.title,
                                  request.control));
  request.control.Finish();
  return Status::Ok();
}

}  // namespace vramscope::report
