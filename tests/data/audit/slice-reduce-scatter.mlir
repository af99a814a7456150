module @jit_body attributes {mhlo.num_partitions = 16 : i32, mhlo.num_replicas = 1 : i32} {
  sdy.mesh @mesh = <["data"=4, "tensor"=4]> {stablehlo.mesh = {axes = [{name = "data", size = 4 : i64}, {name = "tensor", size = 4 : i64}]}}
  func.func public @main(%arg0: tensor<8x32xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"data"}, {"tensor"}]>}) -> (tensor<8x8xf32> {jax.result_info = "result"}) {
    %0 = sdy.manual_computation(%arg0) in_shardings=[<@mesh, [{"data"}, {"tensor"}]>] out_shardings=[<@mesh, [{"data"}, {"tensor"}]>] manual_axes={"data", "tensor"} (%arg1: tensor<2x8xf32>) {
      %c = stablehlo.constant dense<1> : tensor<ui32>
      %c_0 = stablehlo.constant dense<4> : tensor<ui32>
      %1 = stablehlo.partition_id : tensor<ui32>
      %2 = stablehlo.divide %1, %c : tensor<ui32>
      %3 = stablehlo.remainder %2, %c_0 : tensor<ui32>
      %4 = stablehlo.convert %3 : (tensor<ui32>) -> tensor<i32>
      %5 = "stablehlo.all_reduce"(%arg1) <{channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>, replica_groups = dense<[[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11], [12, 13, 14, 15]]> : tensor<4x4xi64>, use_global_device_ids}> ({
      ^bb0(%arg2: tensor<f32>, %arg3: tensor<f32>):
        %11 = stablehlo.add %arg2, %arg3 : tensor<f32>
        stablehlo.return %11 : tensor<f32>
      }) : (tensor<2x8xf32>) -> tensor<2x8xf32>
      %c_1 = stablehlo.constant dense<2> : tensor<i32>
      %6 = stablehlo.multiply %4, %c_1 : tensor<i32>
      %c_2 = stablehlo.constant dense<0> : tensor<i32>
      %7 = stablehlo.compare LT, %6, %c_2, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      %c_3 = stablehlo.constant dense<8> : tensor<i32>
      %8 = stablehlo.add %6, %c_3 : tensor<i32>
      %9 = stablehlo.select %7, %8, %6 : tensor<i1>, tensor<i32>
      %c_4 = stablehlo.constant dense<0> : tensor<i32>
      %10 = stablehlo.dynamic_slice %5, %c_4, %9, sizes = [2, 2] : (tensor<2x8xf32>, tensor<i32>, tensor<i32>) -> tensor<2x2xf32>
      sdy.return %10 : tensor<2x2xf32>
    } : (tensor<8x32xf32>) -> tensor<8x8xf32>
    return %0 : tensor<8x8xf32>
  }
}
