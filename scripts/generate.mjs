// `npm run generate`: regenerates every buf project's code (and descriptor
// set) from its protos, then lints them.
import { bufProjects, buf } from "./buf-projects.mjs";

for (const project of bufProjects) {
  buf(project.dir, ["generate"]);
  if (project.descriptorSet !== undefined) buf(project.dir, ["build", "-o", project.descriptorSet]);
  buf(project.dir, ["lint"]);
  console.log(
    `${project.dir}: generated ${[...project.generated, project.descriptorSet].filter(Boolean).join(", ")}; buf lint passed`,
  );
}
