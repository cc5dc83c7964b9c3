# The one-way dependencies between the folder libraries are enforced by the build (each
# library compiles against build/layers/<lib>/, which holds only the folders it may include).
# Probes: for every library, one file that includes a header it may NOT see (must fail to
# compile, for that reason) and one that includes headers it may see (must compile, so a
# broken include root cannot pass as enforcement).  Each probe is compiled exactly like the
# library's own files: same include root, same flags.  Built only by test_layering.sh.
set(MHE_LAYERING_PROBES
  # library      forbidden header                    allowed headers (deepest dependencies)
  "mhe_common|data/loader.h|common/error.h"
  "mhe_data|trainer/config/config.h|data/loader.h,common/error.h"
  "mhe_kernels|trainer/model/model.h|kernels/ops.h,common/error.h"
  "mhe_comm|kernels/ops.h|comm/comm.h,common/error.h"
  "mhe_config|trainer/model/params.h|trainer/config/config.h,data/tokenizer.h"
  "mhe_model|trainer/io/checkpoint.h|trainer/model/model.h,kernels/ops.h,trainer/config/config.h"
  "mhe_io|trainer/train/optim.h|trainer/io/checkpoint.h,trainer/model/params.h"
  "mhe_task|trainer/io/checkpoint.h|trainer/task/task.h,trainer/model/task_batch.h,trainer/config/config.h"
  "mhe_train|trainer/cli/commands.h|trainer/train/trainer.h,trainer/io/checkpoint.h,trainer/task/task.h,comm/comm.h")
set(MHE_LAYERING_TARGETS)
foreach(probe ${MHE_LAYERING_PROBES})
  string(REPLACE "|" ";" parts "${probe}")
  list(GET parts 0 lib)
  list(GET parts 1 forbidden)
  list(GET parts 2 allowed)
  string(REPLACE "," ";" allowed "${allowed}")
  set(dir ${CMAKE_BINARY_DIR}/layering_probes/${lib})
  file(CONFIGURE OUTPUT ${dir}/forbidden.c
       CONTENT "#include \"${forbidden}\"\nint layering_probe_forbidden;\n")
  set(text "")
  foreach(h ${allowed})
    string(APPEND text "#include \"${h}\"\n")
  endforeach()
  file(CONFIGURE OUTPUT ${dir}/allowed.c CONTENT "${text}int layering_probe_allowed;\n")
  foreach(kind forbidden allowed)
    add_library(layering_${lib}_${kind} OBJECT EXCLUDE_FROM_ALL ${dir}/${kind}.c)
    target_include_directories(layering_${lib}_${kind} PRIVATE
      $<TARGET_PROPERTY:${lib},INCLUDE_DIRECTORIES>)
    target_link_libraries(layering_${lib}_${kind} PRIVATE mhe_external)
  endforeach()
  list(APPEND MHE_LAYERING_TARGETS "${lib}|${forbidden}")
endforeach()
add_test(NAME test_layering_enforced
  COMMAND bash ${CMAKE_SOURCE_DIR}/tests/layering/test_layering.sh ${CMAKE_BINARY_DIR} ${MHE_LAYERING_TARGETS})
# It runs the build tool on this build tree: nothing else may build or run meanwhile.
set_tests_properties(test_layering_enforced PROPERTIES RUN_SERIAL TRUE)
# Tiers (tests/README.md): unit, oracle, e2e, cuda, dist.
set_property(TEST test_layering_enforced APPEND PROPERTY LABELS unit)
