"""cc_sources: the source files of cc_library targets and of everything they
depend on in this workspace, as runfiles.

For tests that compile those sources themselves with another toolchain
(//fuzz:fuzz_test builds them with clang and libFuzzer): the file list follows
the libraries' deps, so a new dependency of a fuzzed library reaches the test
without editing it. Collects `srcs` and `hdrs` source files (not generated
ones) along `deps`, including proto_library sources behind cc_proto_library.

Example:
    cc_sources(name = "wire_sources", deps = ["//core:wire"])
    sh_test(name = "t", srcs = ["t.sh"], data = [":wire_sources"])
"""

_SourcesInfo = provider(fields = {"files": "depset of source Files"})

def _sources_aspect_impl(target, ctx):
    direct = []
    if target.label.workspace_name == "":
        for attr in ("srcs", "hdrs"):
            for f in getattr(ctx.rule.files, attr, []):
                if f.is_source:
                    direct.append(f)
    transitive = [
        dep[_SourcesInfo].files
        for dep in getattr(ctx.rule.attr, "deps", [])
        if _SourcesInfo in dep
    ]
    return [_SourcesInfo(files = depset(direct, transitive = transitive))]

_sources_aspect = aspect(
    implementation = _sources_aspect_impl,
    attr_aspects = ["deps"],
)

def _cc_sources_impl(ctx):
    files = depset(transitive = [dep[_SourcesInfo].files for dep in ctx.attr.deps])
    return [DefaultInfo(files = files, runfiles = ctx.runfiles(transitive_files = files))]

cc_sources = rule(
    implementation = _cc_sources_impl,
    attrs = {
        "deps": attr.label_list(aspects = [_sources_aspect]),
    },
)
