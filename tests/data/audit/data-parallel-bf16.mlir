module @jit__lambda attributes {mhlo.num_partitions = 16 : i32, mhlo.num_replicas = 1 : i32} {
  sdy.mesh @mesh = <["data"=16]> {stablehlo.mesh = {axes = [{name = "data", size = 16 : i64}]}}
  func.func public @main(%arg0: tensor<64x8xbf16> {sdy.sharding = #sdy.sharding<@mesh, [{"data"}, {}]>}) -> (tensor<4x8xbf16> {jax.result_info = "result"}) {
    %0 = sdy.manual_computation(%arg0) in_shardings=[<@mesh, [{"data"}, {}]>] out_shardings=[<@mesh, [{}, {}]>] manual_axes={"data"} (%arg1: tensor<4x8xbf16>) {
      %1 = "stablehlo.all_reduce"(%arg1) <{channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>, replica_groups = dense<[[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15]]> : tensor<1x16xi64>, use_global_device_ids}> ({
      ^bb0(%arg2: tensor<bf16>, %arg3: tensor<bf16>):
        %2 = stablehlo.add %arg2, %arg3 : tensor<bf16>
        stablehlo.return %2 : tensor<bf16>
      }) : (tensor<4x8xbf16>) -> tensor<4x8xbf16>
      sdy.return %1 : tensor<4x8xbf16>
    } : (tensor<64x8xbf16>) -> tensor<4x8xbf16>
    return %0 : tensor<4x8xbf16>
  }
}
