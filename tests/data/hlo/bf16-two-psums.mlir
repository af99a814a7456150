module @jit_two_psums attributes {mhlo.num_partitions = 16 : i32, mhlo.num_replicas = 1 : i32} {
  sdy.mesh @mesh = <["data"=4, "tensor"=4]> {stablehlo.mesh = {axes = [{name = "data", size = 4 : i64}, {name = "tensor", size = 4 : i64}]}}
  func.func public @main(%arg0: tensor<256xbf16>) -> (tensor<256xbf16> {jax.result_info = "result"}) {
    %0 = sdy.manual_computation(%arg0) in_shardings=[<@mesh, [{"data", "tensor"}]>] out_shardings=[<@mesh, [{"data", "tensor"}]>] manual_axes={"data", "tensor"} (%arg1: tensor<16xbf16>) {
      %1 = "stablehlo.all_reduce"(%arg1) <{channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>, replica_groups = dense<[[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11], [12, 13, 14, 15]]> : tensor<4x4xi64>, use_global_device_ids}> ({
      ^bb0(%arg2: tensor<bf16>, %arg3: tensor<bf16>):
        %3 = stablehlo.add %arg2, %arg3 : tensor<bf16>
        stablehlo.return %3 : tensor<bf16>
      }) : (tensor<16xbf16>) -> tensor<16xbf16>
      %2 = "stablehlo.all_reduce"(%1) <{channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>, replica_groups = dense<[[0, 4, 8, 12], [1, 5, 9, 13], [2, 6, 10, 14], [3, 7, 11, 15]]> : tensor<4x4xi64>, use_global_device_ids}> ({
      ^bb0(%arg2: tensor<bf16>, %arg3: tensor<bf16>):
        %3 = stablehlo.add %arg2, %arg3 : tensor<bf16>
        stablehlo.return %3 : tensor<bf16>
      }) : (tensor<16xbf16>) -> tensor<16xbf16>
      sdy.return %2 : tensor<16xbf16>
    } : (tensor<256xbf16>) -> tensor<256xbf16>
    return %0 : tensor<256xbf16>
  }
}
