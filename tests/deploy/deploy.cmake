# Deployment files (deploy/: Dockerfile, Kubernetes manifests, Slurm script; docs/deploy.md):
# parsed and held against each other, this machine's Debian archive and the dtrain binary; the
# pod entrypoint and the sbatch script run with stand-ins for sshd, ssh and Slurm. No container
# runtime or cluster is needed. PyYAML is Debian's python3-yaml (a dependency of python3-torch).
set(DT_DEPLOY_ARGS --root ${PROJECT_SOURCE_DIR} --dtrain $<TARGET_FILE:dtrain>)
if(DT_SANITIZE)
  list(APPEND DT_DEPLOY_ARGS --sanitized)
endif()
add_test(NAME test_deploy COMMAND ${DT_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/deploy/test_deploy.py
         ${DT_DEPLOY_ARGS})
set_tests_properties(test_deploy PROPERTIES LABELS "unit;deploy" TIMEOUT 180)
# scripts/install-deps.sh: demo set a strict subset without test-only services; nothing enabled.
add_test(NAME install_deps_check COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/deploy/install_deps_check.sh
         ${PROJECT_SOURCE_DIR})
set_tests_properties(install_deps_check PROPERTIES LABELS "unit;deploy" TIMEOUT 60)
# deploy/argo/pipeline.yaml's steps run here in DAG order with Argo's substitutions (jsonpath of
# each step's --json stdout): import -> train (dtrain launch -n 2) -> evaluate -> register ->
# champion; a second submission resumes the run and its failed gate skips registration.
if(MPI_FOUND)
  add_test(NAME argo_pipeline COMMAND ${DT_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/deploy/argo_pipeline.py
           --root ${PROJECT_SOURCE_DIR} --dtrain $<TARGET_FILE:dtrain>)
  set_tests_properties(argo_pipeline PROPERTIES LABELS "e2e;deploy" TIMEOUT 240 RUN_SERIAL TRUE
                       ENVIRONMENT "OMP_NUM_THREADS=1")
endif()
