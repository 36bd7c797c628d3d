# Checkpoints: exact resume after preemption (SIGTERM -> save -> exit 75 -> ckpt.resume=auto),
# bit for bit against an uninterrupted run, for a Llama and a ResNet with ZeRO stage 0 and 2.
if(MPI_FOUND)
  foreach(case "llama;0" "llama;2" "resnet;0" "resnet;2")
    list(GET case 0 model)
    list(GET case 1 zero)
    add_test(NAME ckpt_resume_${model}_zero${zero}
             COMMAND ${PROJECT_SOURCE_DIR}/tests/ckpt/resume.sh $<TARGET_FILE:dtrain>
                     ${PROJECT_SOURCE_DIR} ${DT_TRAIN_DATA} ${model} ${zero} ${MPIEXEC_EXECUTABLE}
                     --allow-run-as-root --oversubscribe --bind-to none)
    set_tests_properties(ckpt_resume_${model}_zero${zero} PROPERTIES LABELS "ckpt;dist;e2e"
                         TIMEOUT 300 RUN_SERIAL TRUE FIXTURES_REQUIRED "fortunes_data;fmnist_data"
                         ENVIRONMENT "OMP_NUM_THREADS=1;GOMP_SPINCOUNT=1000")
  endforeach()
endif()
